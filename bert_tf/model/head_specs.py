"""A task's own head as the model tier sees it, without naming it: HeadSpec, and the registry.

The model tier builds the pretraining, classifier, span (SQuAD) and tagger heads itself
(model/heads.py, provenance.BUILT_IN_HEAD_KINDS). Any other head is a task's: its package
defines a HeadSpec as HEAD_SPEC in a module that bert_tf/task_heads.py names (the one
registration a new task edits), and every reader of head kinds asks this registry instead of
naming the head:

  provenance.HEAD_KINDS and its tables   the kind's facts (HeadSpec.facts)
  checkpoints.model_head                 which kind a built model is (HeadSpec.recognise)
  checkpoints.load_weights, conversion   output_weights shared with the classifier
                                         (facts.output_weights: read from what is recorded)
  conversion.source_head                 its weights checked (HeadSpec.check_weights)
  conversion.build_head_model            its model built (HeadSpec.build)
  inference.InferenceModel               how the lean serving graph computes it (HeadSpec.serving)

The registered modules are imported the first time the head kinds are read
(provenance.registered_heads): the model tier never imports a task statically, and a task's
head module imports the model tier like any of the task's modules (it must not read the head
kinds while it is being imported).
"""

import dataclasses
from typing import Callable, Mapping, Optional, Tuple

import keras
import numpy as np

from bert_tf.config import BertConfig
from bert_tf.model import provenance

# HeadSpec.serving: the logits [N, outputs] of the dense layer heads.CLASSIFIER_LAYER on the
# pooled [CLS] output (one row per sequence), as the classifier's; the inference graph computes
# only the [CLS] rows of the last layer.
POOLED_LOGITS = "pooled_logits"
SERVING_MODES = (POOLED_LOGITS,)


@dataclasses.dataclass(frozen=True)
class HeadSpec:
  """A registered head kind.

  Attributes:
    kind: the kind's name, recorded as task_info.json's "head" (and its task_name, when the
      facts list it).
    facts: what a model folder records of it (provenance.HeadKind: Hugging Face class,
      task_names, fine_tuned, output_weights).
    build: (config, outputs) -> its Keras model on the encoder, with variables named as the
      original's (checkpoints.ORIGINAL_NAMES); outputs is the number of outputs its weights have
      (the length of output_bias for an output_weights head), None when not known.
    recognise: whether a Keras model built here is of this kind (checked before the built-in
      kinds, so a head that reuses the classifier's layer names says what tells it apart).
    check_weights: its weights under the original names -> a problem (one line, without the
      path) when they cannot be this head, else None; run when a conversion keeps the head.
    serving: how inference.InferenceModel computes it (one of SERVING_MODES), or None: served as
      the Keras model itself.
  """
  kind: str
  facts: provenance.HeadKind
  build: Callable[[BertConfig, Optional[int]], keras.Model]
  recognise: Callable[[keras.Model], bool]
  check_weights: Optional[Callable[[Mapping[str, np.ndarray]], Optional[str]]] = None
  serving: Optional[str] = None

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
  """The registered head of `kind`; None for a built-in kind, the encoder or an unknown kind."""
  return next((spec for spec in registered() if spec.kind == kind), None)


def recognised(model: keras.Model) -> Optional[str]:
  """The kind of the first registered head that recognises `model`, or None."""
  return next((spec.kind for spec in registered() if spec.recognise(model)), None)


def output_count(values: Optional[Mapping[str, np.ndarray]]) -> Optional[int]:
  """The number of outputs of an output_weights head among `values` (original names): the
  length of output_bias (else of output_weights), None when neither is there."""
  if not values:
    return None
  value = values.get("output_bias", values.get("output_weights"))
  return None if value is None else int(np.shape(value)[0])
