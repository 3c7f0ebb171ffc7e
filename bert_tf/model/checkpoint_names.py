"""Our variables under the original TF1 names: the name table, the original's variable shapes,
and moving values between a model and {original name: array}, the one currency every format's
reader and writer (checkpoint_tf1, checkpoint_model_garden, checkpoint_hf, checkpoint_training)
deals in.

Our variable paths (keras `Variable.path`) map to the original names by the table ORIGINAL_NAMES.
The only layout difference is the next sentence kernel: ours is a Keras Dense kernel [H, 2], the
original stores `cls/seq_relationship/output_weights` as [2, H].

Part of the checkpoint readers and writers whose front door is model/checkpoints.py.
"""

import collections
import dataclasses
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.model import head_specs
from bert_tf.model import layers

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
)
# The fine-tuning heads' rows follow, each registered head's (head_specs.name_rows: its dense
# layer's kernel and bias under the names the original's fine-tuning scripts gave them; the
# kernel stored transposed, [outputs, H]), read when a name is first looked up.

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
  for pattern, template, transpose in ORIGINAL_NAMES + head_specs.name_rows():
    match = re.fullmatch(pattern, path)
    if match:
      return template.format(*match.groups()), transpose
  raise KeyError(f"variable {path!r} has no original BERT name")


def original_variable_shapes(config: BertConfig, heads: bool = True,
                             head_shapes: Optional[Mapping[str, Tuple[int, ...]]] = None
                             ) -> Dict[str, Tuple[int, ...]]:
  """The original model's variable names and shapes, in the original's order.

  As modeling.py:BertModel and run_pretraining.py (get_masked_lm_output,
  get_next_sentence_output) create them, plus a fine-tuned head's when given.

  Args:
    config: the model hyperparameters.
    heads: include the cls/ (masked LM and next sentence) variables.
    head_shapes: a fine-tuned head's weights (original name -> shape, as a registered head's
      HeadWeights.original_shapes gives them), appended.
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
  shapes.update(head_shapes or {})
  return shapes


def model_variables(model) -> Dict[str, Tuple[tf.Variable, bool]]:
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
  for name, (variable, transpose) in model_variables(model).items():
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
  table = model_variables(model)
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


def float32_copy(model, build: Callable[[], Any]):
  """A float32 copy of `model` for SavedModels: build() run under the float32 policy (outside
  any strategy), holding model's weights (matched by their original names)."""
  with layers.dtype_policy("float32"):
    copy_model = build()
  set_original_weights(copy_model, get_original_weights(model), source=model.name)
  return copy_model
