"""A task's own head as the model tier sees it, without naming it: HeadSpec, and the registry.

The model tier builds the pretraining head itself (the encoder's own: model/heads.py,
provenance.BUILT_IN_HEAD_KINDS). Every fine-tuned head is a task's: its package defines a
HeadSpec as HEAD_SPEC in a module that bert_tf/task_heads.py names (the one registration a new
task edits), and every reader of head kinds asks this registry instead of naming the head:

  provenance.HEAD_KINDS and its tables   the kind's facts (HeadSpec.facts: Hugging Face class,
                                         labels, regression, the default head)
  checkpoints.model_head                 which kind a built model is (HeadSpec.recognise)
  checkpoint_names, checkpoint_hf        its weights' names in every format (HeadSpec.weights)
  checkpoints.load_weights, conversion   output_weights shared by several heads
                                         (facts.output_weights: read from what is recorded)
  checkpoint_training                    a training checkpoint's layers rebuilt as its model
                                         (HeadSpec.weights.layer, HeadSpec.pooler)
  conversion.source_head                 its weights checked (HeadSpec.check_weights)
  conversion.build_head_model            its model built (HeadSpec.build)
  conversion.layout_gaps                 the pooler its model has or not (HeadSpec.pooler)
  inference.InferenceModel               how the lean serving graph computes it (HeadSpec.serving)

The registered modules are imported the first time the head kinds are read
(provenance.registered_heads): the model tier never imports a task statically, and a task's
head module imports the model tier like any of the task's modules (it must not read the head
kinds while it is being imported).
"""

import dataclasses
from typing import Callable, Dict, Mapping, Optional, Tuple

import keras
import numpy as np

from bert_tf.config import BertConfig
from bert_tf.model import provenance

# HeadSpec.serving, how the inference graph computes a head from its dense layer
# (HeadSpec.weights.layer):
# POOLED_LOGITS: "logits" [N, outputs] on the pooled [CLS] output (one row per sequence); the
#   inference graph computes only the [CLS] rows of the last layer.
# POSITION_LOGITS: "logits" [N, S, outputs] on every position's final hidden state.
# START_END_LOGITS: a two-output dense layer on every position, its columns the outputs
#   "start_logits" and "end_logits" [N, S] (a span head).
POOLED_LOGITS = "pooled_logits"
POSITION_LOGITS = "position_logits"
START_END_LOGITS = "start_end_logits"
SERVING_MODES = (POOLED_LOGITS, POSITION_LOGITS, START_END_LOGITS)
# The pooler's layer: a model whose head reads no pooled output has none (HeadSpec.pooler).
POOLER_LAYER = "pooler"


@dataclasses.dataclass(frozen=True)
class HeadWeights:
  """A head's weights, one dense layer, as every format names them.

  Attributes:
    layer: the Keras Dense layer's name (our variables <layer>/kernel [H, outputs] and
      <layer>/bias).
    original: the original TF1 names of the kernel (stored transposed, [outputs, H]) and bias.
    hf: their Hugging Face names (at the top level of the state dict, never under "bert.").
    outputs: the number of outputs when the head fixes it (a span head's 2), else None (read
      from the weights: the length of the bias).
  """
  layer: str
  original: Tuple[str, str]
  hf: Tuple[str, str]
  outputs: Optional[int] = None

  def name_rows(self) -> Tuple[Tuple[str, str, bool], ...]:
    """Its rows of checkpoint_names.ORIGINAL_NAMES' table: (our path, original name, transposed)."""
    return ((f"{self.layer}/kernel", self.original[0], True),
            (f"{self.layer}/bias", self.original[1], False))

  def original_shapes(self, hidden_size: int, outputs: Optional[int]
                      ) -> Dict[str, Tuple[int, ...]]:
    """The original names and shapes of its weights with `outputs` outputs (its own count when
    it fixes one)."""
    count = self.outputs if self.outputs is not None else outputs
    return {self.original[0]: (count, hidden_size), self.original[1]: (count,)}


@dataclasses.dataclass(frozen=True)
class HeadSpec:
  """A registered head kind.

  Attributes:
    kind: the kind's name, recorded as task_info.json's "head" (and its task_name, when the
      facts list it).
    facts: what a model folder records of it (provenance.HeadKind: Hugging Face class,
      task_names, fine_tuned, output_weights, labelled, regression, default).
    weights: its dense layer's names in every format (HeadWeights).
    build: (config, outputs) -> its Keras model on the encoder, with variables named as the
      original's (checkpoints.ORIGINAL_NAMES); outputs is the number of outputs its weights have
      (the length of output_bias for an output_weights head), None when not known.
    recognise: whether a Keras model built here is of this kind; no two heads' models may both
      be recognised (heads that share a layer name say what else tells them apart: a dropout
      layer's name, the rank of the logits).
    check_weights: its weights under the original names -> a problem (one line, without the
      path) when they cannot be this head, else None; run when a conversion keeps the head.
    serving: how inference.InferenceModel computes it (one of SERVING_MODES), or None: served as
      the Keras model itself.
    pooler: whether its model has the encoder's pooler (False for a head on every position:
      the pooler is then neither built nor converted, as in Hugging Face's models of it). A
      training checkpoint's layers (weights.layer, and the pooler or not) say which head it
      holds; when several heads would fit, the default head (facts.default).
  """
  kind: str
  facts: provenance.HeadKind
  weights: HeadWeights
  build: Callable[[BertConfig, Optional[int]], keras.Model]
  recognise: Callable[[keras.Model], bool]
  check_weights: Optional[Callable[[Mapping[str, np.ndarray]], Optional[str]]] = None
  serving: Optional[str] = None
  pooler: bool = True

  def __post_init__(self):
    if self.serving is not None and self.serving not in SERVING_MODES:
      raise ValueError(f"head {self.kind!r}: serving {self.serving!r} is not one of "
                       f"{', '.join(SERVING_MODES)}")


def registered() -> Tuple[HeadSpec, ...]:
  """Every registered head (bert_tf/task_heads.py), imported on the first call.

  Raises:
    TypeError: a registered module whose HEAD_SPEC is not a HeadSpec.
  """
  specs = provenance.registered_heads()
  for spec in specs:
    if not isinstance(spec, HeadSpec):
      raise TypeError(f"the registered head {getattr(spec, 'kind', spec)!r} "
                      "(bert_tf/task_heads.py) is not a head_specs.HeadSpec")
  return specs


def spec_of(kind: Optional[str]) -> Optional[HeadSpec]:
  """The registered head of `kind`; None for the pretraining head, the encoder or an unknown
  kind."""
  return next((spec for spec in registered() if spec.kind == kind), None)


def recognised(model: keras.Model) -> Optional[str]:
  """The kind of the registered head that recognises `model`, or None."""
  return next((spec.kind for spec in registered() if spec.recognise(model)), None)


def name_rows() -> Tuple[Tuple[str, str, bool], ...]:
  """Every registered head's rows of the name table (HeadWeights.name_rows), each row once
  (heads that share a layer share its rows)."""
  return tuple(dict.fromkeys(row for spec in registered() for row in spec.weights.name_rows()))


def weight_groups() -> Dict[Tuple[str, str], Tuple[str, ...]]:
  """The original names of the registered heads' weights -> the kinds whose weights they are,
  in registry order (heads that share names: which one a checkpoint holds is read from what is
  recorded beside it, default_kind when nothing is)."""
  groups: Dict[Tuple[str, str], Tuple[str, ...]] = {}
  for spec in registered():
    groups[spec.weights.original] = groups.get(spec.weights.original, ()) + (spec.kind,)
  return groups


def default_kind(kinds) -> Optional[str]:
  """The first of `kinds` (kinds of heads whose weights have the same names), preferring the
  default head: what such weights are when nothing recorded says."""
  kinds = list(kinds)
  default = [kind for kind in kinds if provenance.HEAD_KINDS[kind].default]
  return (default or kinds or [None])[0]


def spec_for_layers(found: Mapping[str, object]) -> Optional[HeadSpec]:
  """The head whose model a training checkpoint's layers (`found`: layer name -> variables)
  are: its dense layer there, and the pooler there exactly when its model has one; the default
  head when several fit. None: no registered head's."""
  fits = [spec for spec in registered()
          if spec.weights.layer in found and (POOLER_LAYER in found) == spec.pooler]
  kind = default_kind(spec.kind for spec in fits)
  return spec_of(kind) if kind else None


def output_count(values: Optional[Mapping[str, np.ndarray]]) -> Optional[int]:
  """The number of outputs of an output_weights head among `values` (original names): the
  length of output_bias (else of output_weights), None when neither is there."""
  if not values:
    return None
  value = values.get("output_bias", values.get("output_weights"))
  return None if value is None else int(np.shape(value)[0])
