"""A fine-tuned multiple-choice model on raw text, for TF Serving.

MultipleChoiceModule's signatures (B = examples, C = choices, any C >= 1 per request):
  serving_default: context [B] string, choices [B, C] string -> probabilities [B, C] float32
    (the softmax over each example's choices) and choice [B] int32 (the most probable one).
    choices is a dense [B, C]: the examples of one request have the same number of choices (an
    empty string is a choice like any other, scored, not skipped); a choices of another row
    count than context, or of no choice, is refused.

Each choice is the pair (context, choice) packed as in fine-tuning: [CLS] context [SEP] choice
[SEP], the pair truncated as the original's _truncate_seq_pair (the in-graph Packer), every
choice its own row of the model (modules.ReusableModule.infer: the lean inference graph, packed
rows when the export asks for them). A question (SWAG's sent2, the JSONL's question) goes in
front of each choice, as in training: "question choice".

__call__(inputs, training=False) for TF Hub: {"context": [B], "choices": [B, C]} -> logits and
probabilities [B, C] float32.
"""

from typing import Any, Mapping, Optional

import numpy as np
import tensorflow as tf

from bert_tf import length_buckets as length_buckets_lib
from bert_tf.config import BertConfig
from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.packing import Packer
from bert_tf.serving import modules
from bert_tf.serving import tf_serving

_CONTEXT = tf.TensorSpec([None], tf.string)
_CHOICES = tf.TensorSpec([None, None], tf.string)
# Warm-up: two examples of three choices, one short and one long enough to fill most rows.
WARMUP_CONTEXTS = ("The man went to the store.", "He bought a gallon of milk, " * 8)
WARMUP_CHOICES = (("He bought milk.", "He flew away.", "He sang."),
                  ("and went home.", "and ate the moon.", "and swam to France."))


class MultipleChoiceModule(modules.ReusableModule):
  """The multiple-choice model on raw text (the module docstring)."""

  def __init__(self, packer: Packer, model, seq_length: int):
    super().__init__(name="bert_multiple_choice")
    self.packer = packer
    self.model = model
    self.seq_length = seq_length
    self.set_inference(model)
    self._pack_pairs = tf.function(self._pack, input_signature=[_CONTEXT, _CONTEXT],
                                   autograph=False)
    self.serving_default = modules.signature_function(self._choose, [_CONTEXT, _CHOICES])
    self.signature_functions = {"serving_default": self.serving_default}
    self.make_reusable(model, self._call, [dict(context=_CONTEXT, choices=_CHOICES)])

  def _pack(self, text, text_b):
    # Every choice is a pair, an empty one too ([CLS] context [SEP] [SEP]), as in the records.
    return self.packer.pack(self.packer.tokenize(text), self.packer.tokenize(text_b),
                            tf.fill(tf.shape(text, out_type=tf.int32)[:1], self.seq_length),
                            pad_to=self.seq_length, always_pair=True)

  def _logits(self, context, choices, training=False):
    """[B, C] float32: one score per (context, choice) pair."""
    rows, count = tf.shape(choices)[0], tf.shape(choices)[1]
    checks = [
        tf.debugging.assert_equal(
            rows, tf.shape(context)[0],
            message="choices must have one row per context; the rows of choices and context "
                    "are"),
        tf.debugging.assert_equal(
            (rows == 0) | (count > 0), True,
            message="choices: each example needs at least one choice")]
    with tf.control_dependencies(checks):
      choices = tf.identity(choices)
    contexts = tf.reshape(tf.repeat(context[:, tf.newaxis], count, axis=1), [-1])
    inputs = self._pack_pairs(contexts, tf.reshape(choices, [-1]))
    inputs = {key: inputs[key] for key in ENCODER_INPUTS}
    outputs = self.model(inputs, training=True) if training else self.infer(inputs)
    return tf.reshape(tf.cast(outputs["logits"], tf.float32), tf.shape(choices))

  def _call(self, inputs, training):
    logits = self._logits(inputs["context"], inputs["choices"], training)
    return dict(logits=logits, probabilities=tf.nn.softmax(logits, axis=-1))

  def _choose(self, context, choices):
    logits = self._logits(context, choices)
    # A column below every score, so that a request of no choices (0 columns) still has an
    # axis to reduce; it is never chosen otherwise.
    floor = tf.pad(logits, [[0, 0], [0, 1]], constant_values=float("-inf"))
    return dict(probabilities=tf.nn.softmax(logits, axis=-1),
                choice=tf.argmax(floor, axis=-1, output_type=tf.int32))


def warmup_inputs() -> Mapping[str, np.ndarray]:
  """The warm-up request of serving_default."""
  return dict(context=np.array([t.encode("utf-8") for t in WARMUP_CONTEXTS], dtype=object),
              choices=np.array([[c.encode("utf-8") for c in row] for row in WARMUP_CHOICES],
                               dtype=object))


def export_multiple_choice_model(model, config: BertConfig, vocab_file: str, export_dir: str,
                                 do_lower_case: bool = True,
                                 seq_length: int = tf_serving.DEFAULT_SEQ_LENGTH,
                                 version: Optional[int] = None,
                                 model_name: str = "multiple_choice",
                                 task_info: Optional[Mapping[str, Any]] = None,
                                 warmup: bool = True,
                                 length_buckets: Optional[str] = length_buckets_lib.AUTO) -> str:
  """Writes the raw-text multiple-choice SavedModel in TF Serving's layout
  (tf_serving.export_task_module; the arguments are the classifier's export_classifier_model's).

  Size: eleven parameters, the export's settings as the command's flags give them, one each.

  Returns:
    The version directory written.
  """
  return tf_serving.export_task_module(
      lambda packer: MultipleChoiceModule(packer, model, seq_length), config, vocab_file,
      export_dir, do_lower_case=do_lower_case, seq_length=seq_length, version=version,
      model_name=model_name, info=dict(kind="multiple_choice"), task_info=task_info,
      warmup_inputs=lambda name: warmup_inputs(), warmup=warmup, length_buckets=length_buckets)
