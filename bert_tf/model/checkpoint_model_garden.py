"""TF Model Garden (tf-models-official) encoders: their checkpoints and live BertEncoder /
BertEncoderV2 objects read under the original names.

Part of the checkpoint readers and writers whose front door is model/checkpoints.py.
"""

import re
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np
from tensorflow.core.protobuf import trackable_object_graph_pb2

from bert_tf.model.checkpoint_names import LoadReport, set_original_weights
from bert_tf.model.checkpoint_tf1 import checkpoint_reader

# === TF Model Garden (tf-models-official) encoders ===
# Model Garden's BertEncoder / BertEncoderV2 variable names (without the model name prefix), as
# regular expressions, with the original name and the shape conversion. Its attention kernels
# are per head: query/key/value [H, N, D] with bias [N, D], output [N, D, H]; reshaping N * D -> H
# row-major is exactly the original's head split.
_MODEL_GARDEN_NAMES: Tuple[Tuple[str, str], ...] = (
    (r"word_embeddings/embeddings", "bert/embeddings/word_embeddings"),
    (r"type_embeddings/embeddings", "bert/embeddings/token_type_embeddings"),
    (r"position_embedding/embeddings", "bert/embeddings/position_embeddings"),
    (r"embeddings/layer_norm/(gamma|beta)", "bert/embeddings/LayerNorm/{0}"),
    (r"transformer/layer_(\d+)/self_attention/(query|key|value)/(kernel|bias)",
     "bert/encoder/layer_{0}/attention/self/{1}/{2}"),
    (r"transformer/layer_(\d+)/self_attention/attention_output/(kernel|bias)",
     "bert/encoder/layer_{0}/attention/output/dense/{1}"),
    (r"transformer/layer_(\d+)/self_attention_layer_norm/(gamma|beta)",
     "bert/encoder/layer_{0}/attention/output/LayerNorm/{1}"),
    (r"transformer/layer_(\d+)/intermediate/(kernel|bias)",
     "bert/encoder/layer_{0}/intermediate/dense/{1}"),
    (r"transformer/layer_(\d+)/output/(kernel|bias)", "bert/encoder/layer_{0}/output/dense/{1}"),
    (r"transformer/layer_(\d+)/output_layer_norm/(gamma|beta)",
     "bert/encoder/layer_{0}/output/LayerNorm/{1}"),
    (r"pooler_transform/(kernel|bias)", "bert/pooler/dense/{0}"),
)

# Object-graph attribute names of a transformer layer in Model Garden checkpoints -> the
# variable name suffix used above.
_MODEL_GARDEN_BLOCK_ATTRIBUTES = {
    "_attention_layer/_query_dense": "self_attention/query",
    "_attention_layer/_key_dense": "self_attention/key",
    "_attention_layer/_value_dense": "self_attention/value",
    "_attention_layer/_output_dense": "self_attention/attention_output",
    "_attention_layer_norm": "self_attention_layer_norm",
    "_intermediate_dense": "intermediate",
    "_output_dense": "output",
    "_output_layer_norm": "output_layer_norm",
}
# BertEncoderV2 (a subclassed model) names its sublayers by attribute.
_MODEL_GARDEN_V2_ATTRIBUTES = {
    "_embedding_layer": "word_embeddings",
    "_type_embedding_layer": "type_embeddings",
    "_position_embedding_layer": "position_embedding",
    "_embedding_norm_layer": "embeddings/layer_norm",
    "_pooler_layer": "pooler_transform",
}
# BertEncoder (functional) checkpoints number its layers: these come first, then the
# transformer layers, then the pooler.
_MODEL_GARDEN_V1_FIRST_LAYERS = ("word_embeddings", "position_embedding", "type_embeddings",
                                 "embeddings/layer_norm")
_CHECKPOINT_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


def model_garden_to_original(values: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """Converts Model Garden BertEncoder variable names and layouts to the original's.

  Args:
    values: Model Garden variable name (e.g. "transformer/layer_0/self_attention/query/kernel",
      with or without the model name prefix and ":0") -> array.

  Returns:
    Original name -> array, ready for set_original_weights.

  Raises:
    KeyError: a variable that has no original counterpart (e.g. an embedding projection).
  """
  result = {}
  for name, value in values.items():
    name = name.split(":")[0]
    value = np.asarray(value)
    for pattern, template in _MODEL_GARDEN_NAMES:
      match = re.search(r"(?:^|/)" + pattern + "$", name)
      if match:
        original = template.format(*match.groups())
        break
    else:
      raise KeyError(f"Model Garden variable {name!r} has no original BERT counterpart")
    if re.search(r"self/(query|key|value)/kernel$", original):
      value = value.reshape(value.shape[0], -1)      # [H, N, D] -> [H, H]
    elif re.search(r"self/(query|key|value)/bias$", original):
      value = value.reshape(-1)                      # [N, D] -> [H]
    elif original.endswith("attention/output/dense/kernel"):
      value = value.reshape(-1, value.shape[-1])     # [N, D, H] -> [H, H]
    result[original] = value
  return result


def model_garden_encoder_weights(encoder) -> Dict[str, np.ndarray]:
  """The weights of a live Model Garden BertEncoder / BertEncoderV2 under the original names."""
  return model_garden_to_original({v.name: v.numpy() for v in encoder.weights})


def _graph_node(graph, object_path: str):
  """The node of a checkpoint's object graph at `object_path` ("a/b/c"), or None."""
  node = graph.nodes[0]
  for part in object_path.split("/"):
    child = [c.node_id for c in node.children if c.local_name == part]
    if not child:
      return None
    node = graph.nodes[child[0]]
  return node


def _model_garden_encoder(path: str, prefix: Optional[str] = None):
  """(reader, object graph, encoder prefix, BertEncoder version 1 or 2) of a Model Garden
  checkpoint; see read_model_garden_checkpoint."""
  reader = checkpoint_reader(path)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
  keys = [k for k in reader.get_variable_to_shape_map()
          if k.endswith(_CHECKPOINT_VALUE) and ".OPTIMIZER_SLOT" not in k]
  markers = {2: "/_transformer_layers/0/_attention_layer/_query_dense/kernel",
             1: "/layer_with_weights-4/_attention_layer/_query_dense/kernel"}
  found = [(k[:-len(marker + _CHECKPOINT_VALUE)], version) for k in keys
           for version, marker in markers.items() if k.endswith(marker + _CHECKPOINT_VALUE)]
  if prefix is not None:
    found = [(p, version) for p, version in found if p == prefix.rstrip("/")]
  if len(found) != 1:
    raise ValueError(f"{path}: expected one Model Garden BERT encoder"
                     f"{' at ' + prefix if prefix else ''}, found "
                     f"{[p for p, _ in found] or 'none'}; pass prefix= to choose")
  return (reader, graph) + found[0]


def model_garden_head_variables(path: str, prefix: Optional[str] = None) -> List[str]:
  """The variables of a Model Garden checkpoint that read_model_garden_checkpoint leaves out:
  neither the encoder's nor the optimizer's nor a counter, i.e. the heads of a pretrainer or
  task model saved with it (their layout has no original names, so conversion cannot keep them).

  A variable the encoder shares with a head (the word embeddings) counts as the encoder's.
  """
  reader, graph, prefix, _ = _model_garden_encoder(path, prefix)
  encoder = _graph_node(graph, prefix)
  encoder_keys, seen = set(), set()
  stack = list(encoder.children)
  encoder_keys.update(a.checkpoint_key for a in encoder.attributes)
  while stack:
    node_id = stack.pop().node_id
    if node_id not in seen:
      seen.add(node_id)
      encoder_keys.update(a.checkpoint_key for a in graph.nodes[node_id].attributes)
      stack.extend(graph.nodes[node_id].children)
  return sorted(key[:-len(_CHECKPOINT_VALUE)]
                for key, shape in reader.get_variable_to_shape_map().items()
                if key.endswith(_CHECKPOINT_VALUE) and key not in encoder_keys and shape
                and ".OPTIMIZER_SLOT" not in key and not key.startswith("optimizer/"))


def read_model_garden_checkpoint(path: str, prefix: Optional[str] = None
                                 ) -> Dict[str, np.ndarray]:
  """Reads the encoder of a Model Garden (object-based, TF2) checkpoint under the original names.

  Works for BertEncoder (functional: `layer_with_weights-K` children) and BertEncoderV2
  (attribute children), saved alone or inside a pretrainer or a task model. Variables are found by
  walking the checkpoint's object graph, so a table shared with a head (stored once, under the
  head's path) is still found from the encoder; optimizer slots are never read.

  Args:
    path: checkpoint prefix or directory.
    prefix: the object path of the encoder in the checkpoint (e.g. "encoder" or
      "model/encoder_network"); found automatically when there is exactly one encoder.
  """
  reader, graph, prefix, version = _model_garden_encoder(path, prefix)

  def value(object_path):
    node = _graph_node(graph, object_path)
    keys = [a.checkpoint_key for a in node.attributes
            if a.name == "VARIABLE_VALUE"] if node else []
    return reader.get_tensor(keys[0]) if keys else None

  if version == 2:
    objects = list(_MODEL_GARDEN_V2_ATTRIBUTES.items())
    block = lambda n: f"_transformer_layers/{n}"
  else:
    objects = [(f"layer_with_weights-{k}", name)
               for k, name in enumerate(_MODEL_GARDEN_V1_FIRST_LAYERS)]
    block = lambda n: f"layer_with_weights-{len(_MODEL_GARDEN_V1_FIRST_LAYERS) + n}"
  num_layers = 0
  while value(f"{prefix}/{block(num_layers)}/_attention_layer/_query_dense/kernel") is not None:
    num_layers += 1
  if version == 1:  # the pooler is the layer after the last transformer layer
    objects.append((block(num_layers), "pooler_transform"))
  for n in range(num_layers):
    objects += [(f"{block(n)}/{attribute}", f"transformer/layer_{n}/{name}")
                for attribute, name in _MODEL_GARDEN_BLOCK_ATTRIBUTES.items()]
  values = {}
  for object_path, name in objects:
    for variable in ("embeddings", "kernel", "bias", "gamma", "beta"):
      array = value(f"{prefix}/{object_path}/{variable}")
      if array is not None:
        values[f"{name}/{variable}"] = array
  return model_garden_to_original(values)


def load_model_garden_encoder(model, source, strict: bool = True,
                              prefix: Optional[str] = None) -> LoadReport:
  """Loads a Model Garden BertEncoder / BertEncoderV2 into our encoder or pretraining model.

  Args:
    model: a model from build_encoder or build_pretraining_model (the heads are left as built).
    source: a checkpoint path, or a live Model Garden encoder object.
    strict: raise if an encoder variable is missing or has another shape.
    prefix: see read_model_garden_checkpoint.
  """
  if isinstance(source, str):
    values, name = read_model_garden_checkpoint(source, prefix), source
  else:
    values, name = model_garden_encoder_weights(source), f"Model Garden {source.name}"
  # Model Garden encoders have no pretraining heads: a pretraining model keeps its own.
  return set_original_weights(model, values, strict=strict, source=name, optional=("cls/",))
