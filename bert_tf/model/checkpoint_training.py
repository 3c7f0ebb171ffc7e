"""Our training checkpoints (run_pretraining's and every fine-tuning run's): the model's layers
tracked by name, the dropout seeds, restoring them, and reading one under the original names.

Part of the checkpoint readers and writers whose front door is model/checkpoints.py.
"""

import re
from typing import Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from bert_tf.config import BertConfig
from bert_tf.model.checkpoint_names import get_original_weights
from bert_tf.model.checkpoint_tf1 import checkpoint_reader
from bert_tf.model.encoder import build_encoder
from bert_tf.model import head_specs
from bert_tf.model.heads import build_pretraining_model

# === Our training checkpoints ===
# run_pretraining writes tf.train.Checkpoint(model=checkpointable(model), optimizer=...,
# step=...). The model's layers are tracked by name (model/layer_0/attention/query/...), not by
# their index in the Keras graph, so that a checkpoint restores into any model with the same
# layers: the pruned training graph (heads.build_pretraining_model(prune_last_layer=True)) and
# the full graph used for export and serving order their operations differently.


def checkpointable(model) -> tf.Module:
  """A trackable holding `model`'s layers that own weights, as attributes named like them."""
  holder = tf.Module(name="bert_tf_model")
  for layer in model.layers:
    if layer.weights:
      setattr(holder, layer.name, layer)
  return holder


DROPOUT_SEEDS = "dropout_seeds"  # the key of the dropout RNG states in a training checkpoint


def dropout_seed_states(model) -> Optional[tf.Module]:
  """A trackable holding the state of every dropout SeedGenerator of `model`, in model order.

  Keras keeps these states out of `model.weights` (they are in `model.variables`), so the
  layer-by-name checkpointable() does not save them. Training checkpoints save them under
  DROPOUT_SEEDS, so that a resumed run draws the masks the uninterrupted run would have drawn.
  None when the model has no dropout (rate 0 layers make no SeedGenerator).
  """
  weights = {id(v) for v in model.weights}
  states = [v for v in model.variables
            if id(v) not in weights and v.path.endswith("seed_generator_state")]
  if not states:
    return None
  holder = tf.Module(name=DROPOUT_SEEDS)
  holder.states = states
  return holder


def is_training_checkpoint(path: str) -> bool:
  """Whether `path` is a checkpoint written by our run_pretraining."""
  try:
    names = checkpoint_reader(path).get_variable_to_shape_map()
  except (tf.errors.NotFoundError, ValueError, tf.errors.DataLossError):
    return False
  return "step/.ATTRIBUTES/VARIABLE_VALUE" in names and "_CHECKPOINTABLE_OBJECT_GRAPH" in names


def restore_training_checkpoint(model, path: str,
                                saved: Optional[Mapping[str, object]] = None) -> None:
  """Restores the weights (only) of one of our training checkpoints into `model`.

  Raises:
    ValueError: a layer of `model` that owns weights is missing from the checkpoint, or a shape
      differs (e.g. a config that does not match the checkpoint).
  """
  if saved is None:
    saved = training_checkpoint_layers(path)
  missing = [layer.name for layer in model.layers if layer.weights and layer.name not in saved]
  if missing:
    raise ValueError(f"{path} does not hold this model's weights: no layer {', '.join(missing)} "
                     f"in it (it has {', '.join(sorted(saved))})")
  status = tf.train.Checkpoint(model=checkpointable(model)).read(path).expect_partial()
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    # The message lists the unmatched variables with their values: keep the paths only.
    paths = re.findall(r"path=([^,\s]+)", str(e))
    raise ValueError(f"{path} does not hold this model's weights (shapes or layers differ: "
                     f"{', '.join(paths[:10]) or 'unmatched objects'})") from None


def training_checkpoint_layers(path: str) -> Dict[str, Dict[str, Tuple[int, ...]]]:
  """The model layers saved in one of our training checkpoints, with their direct variables.

  Read from the checkpoint's object graph (a variable reachable from both the model and the
  optimizer is stored once, under whichever path is shorter, so the names alone do not say
  which layers are there).

  Returns:
    {layer name: {variable attribute: shape}} for every layer under the root's "model".
  """
  reader = checkpoint_reader(path)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
  shapes = reader.get_variable_to_shape_map()
  nodes = graph.nodes
  model = next((c.node_id for c in nodes[0].children if c.local_name == "model"), None)
  if model is None:
    return {}
  layers_found = {}
  for child in nodes[model].children:
    variables = {}
    for attribute in nodes[child.node_id].children:
      for saved in nodes[attribute.node_id].attributes:
        if saved.checkpoint_key in shapes:
          variables[attribute.local_name] = tuple(shapes[saved.checkpoint_key])
    layers_found[child.local_name] = variables
  return layers_found


def build_model_like_checkpoint(path: str, config: BertConfig,
                                found: Optional[Mapping[str, object]] = None):
  """The model (pretraining, a registered head's or the encoder) whose layers one of our training
  checkpoints holds (`found`: its training_checkpoint_layers), built from config.

  A registered head's dense layer (HeadSpec.weights.layer) says which head it is; heads that
  name that layer alike are told apart by the pooler (a head on every position has none, so its
  checkpoint holds no pooler layer at all: head_specs.spec_for_layers), its outputs read from
  the kernel's shape.
  """
  if found is None:
    found = training_checkpoint_layers(path)
  spec = head_specs.spec_for_layers(found)
  if spec is not None:
    layer = spec.weights.layer
    shape = found[layer].get("_kernel") or found[layer].get("kernel")
    if not shape:
      raise ValueError(f"{path}: the {layer} layer has no kernel")
    return spec.build(config, shape[-1])
  if "seq_relationship" in found or "predictions_transform" in found:
    return build_pretraining_model(config)
  return build_encoder(config)


def read_training_checkpoint(path: str, config: BertConfig) -> Dict[str, np.ndarray]:
  """Original name -> array of the weights in one of our training checkpoints (of any task)."""
  found = training_checkpoint_layers(path)
  model = build_model_like_checkpoint(path, config, found)
  restore_training_checkpoint(model, path, found)
  return get_original_weights(model)


def config_from_model(model) -> BertConfig:
  """The BertConfig a model from build_encoder / build_pretraining_model was built with."""
  word = model.get_layer("word_embeddings").get_config()
  embeddings = model.get_layer("embeddings").get_config()
  block = model.get_layer("layer_0").get_config()
  num_layers = len([layer for layer in model.layers if re.fullmatch(r"layer_\d+", layer.name)])
  return BertConfig(
      vocab_size=word["vocab_size"], hidden_size=word["hidden_size"],
      num_hidden_layers=num_layers, num_attention_heads=block["num_attention_heads"],
      intermediate_size=block["intermediate_size"], hidden_act=block["hidden_act"],
      hidden_dropout_prob=block["hidden_dropout_prob"],
      attention_probs_dropout_prob=block["attention_probs_dropout_prob"],
      max_position_embeddings=embeddings["max_position_embeddings"],
      type_vocab_size=embeddings["type_vocab_size"],
      initializer_range=block["initializer_range"])
