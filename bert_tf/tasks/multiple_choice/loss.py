"""Multiple choice as a task of the generic loop: a softmax over each example's choices.

`head.build_multiple_choice_model` scores each choice's sequence alone (one logit from its
pooled [CLS] output); the input pipeline reads an example's choices as rows of their own
(training.bucketing.as_sequences), each carrying SEQUENCE_INDEX (which choice) and BATCH_EXAMPLE
(its example's position in the batch) beside the example's label_ids and is_real_example.
`choice_scores` gathers the per-sequence logits back into [examples, choices] by those two
indices, so the loss is the same whether the rows are one choice each or packed rows whose slots
hold the choices in any order (--packing=exact keeps every choice of an example in its batch;
empty slots and padding examples weigh 0).

The loss is the mean over the global batch of each example's cross-entropy of the softmax over
its choices (Hugging Face's BertForMultipleChoice, the paper's section 4.4), summed per replica
and divided by the update's examples as the classifier's is.
"""

from typing import Any, Dict, List, Mapping

import tensorflow as tf

from bert_tf.model.encoder import ENCODER_INPUTS, PACKED_INPUTS
from bert_tf.tasks.multiple_choice import data as mc_data
from bert_tf.training import evaluation
from bert_tf.training import loop
from bert_tf.training.bucketing import BATCH_EXAMPLE, SEQUENCE_INDEX


def model_inputs(batch):
  """The model's inputs: the encoder's, and those of packed rows when the batch has them."""
  return {key: batch[key] for key in ENCODER_INPUTS + PACKED_INPUTS if key in batch}


def _real(batch) -> tf.Tensor:
  """bool [N]: the sequences of real examples (not an empty slot nor a padding example)."""
  return tf.reshape(batch[mc_data.IS_REAL_EXAMPLE], [-1]) > 0


def choice_scores(logits: tf.Tensor, batch: Mapping[str, tf.Tensor], num_choices: int):
  """Per-sequence logits [N, 1] as (scores [E, C] float32, labels [E] int32, weights [E]
  float32) of the batch's E examples (E: one past the largest BATCH_EXAMPLE of a real
  sequence); an example with no real sequence (padding) weighs 0 and scores 0."""
  real = _real(batch)
  example = tf.where(real, tf.reshape(tf.cast(batch[BATCH_EXAMPLE], tf.int32), [-1]), 0)
  choice = tf.where(real, tf.reshape(tf.cast(batch[SEQUENCE_INDEX], tf.int32), [-1]), 0)
  count = tf.reduce_max(tf.concat([example, [-1]], 0)) + 1
  shape = tf.stack([count, num_choices])
  index = tf.stack([example, choice], axis=1)
  zeros = tf.zeros_like(example)
  scores = tf.scatter_nd(index, tf.where(real, tf.reshape(tf.cast(logits, tf.float32), [-1]),
                                         0.0), shape)
  labels = tf.scatter_nd(index, tf.where(
      real, tf.reshape(tf.cast(batch[mc_data.LABEL_IDS], tf.int32), [-1]), zeros), shape)
  present = tf.scatter_nd(index, tf.cast(real, tf.float32), shape)
  # Every real sequence of an example carries the example's label; its weight is 1 when the
  # example has any (all of its choices are in the batch).
  return scores, tf.reduce_max(labels, axis=1), tf.reduce_max(present, axis=1)


def _nll_and_correct(scores, labels):
  log_probs = tf.nn.log_softmax(scores, axis=-1)
  nll = -tf.gather(log_probs, labels, batch_dims=1)
  correct = tf.cast(tf.equal(tf.argmax(scores, axis=-1, output_type=tf.int32), labels),
                    tf.float32)
  return nll, correct


def normalizers(batch):
  """Packed rows: the batch's real examples (the loop sums them over the update); none
  otherwise (the update's examples are train_batch_size)."""
  if PACKED_INPUTS[0] not in batch:
    return {}
  first = tf.equal(tf.reshape(tf.cast(batch[SEQUENCE_INDEX], tf.int32), [-1]), 0)
  return {"examples": tf.reduce_sum(tf.cast(_real(batch) & first, tf.float32))}


def make_task(num_choices: int) -> loop.Task:
  """The loop.Task of examples of num_choices choices."""

  def replica_loss(outputs, batch, global_normalizers, examples_per_update):
    scores, labels, weights = choice_scores(outputs["logits"], batch, num_choices)
    nll, correct = _nll_and_correct(scores, labels)
    denominator = (tf.maximum(global_normalizers["examples"], 1.0)
                   if "examples" in global_normalizers else float(examples_per_update))
    return tf.reduce_sum(weights * nll) / denominator, dict(
        correct=tf.reduce_sum(weights * correct), examples=tf.reduce_sum(weights))

  def eval_sums(outputs, batch):
    scores, labels, weights = choice_scores(outputs["logits"], batch, num_choices)
    nll, correct = _nll_and_correct(scores, labels)
    return dict(nll=tf.reduce_sum(weights * nll), correct=tf.reduce_sum(weights * correct),
                examples=tf.reduce_sum(weights))

  return loop.Task(model_inputs=model_inputs, normalizers=normalizers,
                   replica_loss=replica_loss, sum_names=("correct", "examples"),
                   train_metrics=train_metrics, eval_sums=eval_sums, eval_results=eval_results)


def train_metrics(totals: Mapping[str, float], good_steps: int) -> Dict[str, float]:
  return dict(loss=totals["loss"] / good_steps,
              accuracy=totals["correct"] / max(totals["examples"], 1.0))


def eval_results(batch_sums: List[Mapping[str, Any]]) -> Dict[str, float]:
  """eval_accuracy and eval_loss over the real examples, and the original's `loss` (the mean
  of the batches' mean losses), as run_classifier reports them."""
  total = evaluation.sum_batches(batch_sums)
  examples = max(total["examples"], 1.0)
  means = [float(b["nll"]) / float(b["examples"]) for b in batch_sums if float(b["examples"])]
  return dict(eval_accuracy=total["correct"] / examples, eval_loss=total["nll"] / examples,
              loss=sum(means) / max(len(means), 1))
