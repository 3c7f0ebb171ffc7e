"""Token classification's loss as a task of the generic loop: the tagger's loss and sums.

The model is head.build_tagger_model (dropout and a dense layer on every position's final
hidden state). The loss is Hugging Face's BertForTokenClassification loss and the usual BERT NER
recipe: the mean cross-entropy over the labelled positions of the batch (each word's first
piece, label_mask 1). The mean is over the global batch: the loop all-reduces the count of
labelled positions (normalizers) before replicas and gradient-accumulation micro-batches add
their shares, so any split of the batch gives the same update.

Entity-level scores are computed on words after prediction (tagging_metrics); the eval sums here
give the token loss and accuracy over labelled positions.
"""

from typing import Any, Dict, List, Mapping

import tensorflow as tf

from bert_tf.model.encoder import ENCODER_INPUTS, PACKED_INPUTS
from bert_tf.training import evaluation
from bert_tf.training import loop
from bert_tf.training import losses
from bert_tf.training.distillation import predictions


def model_inputs(batch):
  """The model's inputs of a batch: the encoder's, and input_position_ids for packed rows (the
  loss and sums are per position, so packed rows need nothing else)."""
  return {key: batch[key] for key in ENCODER_INPUTS + PACKED_INPUTS[:1] if key in batch}


def normalizers(batch):
  return {"label_weight": tf.reduce_sum(tf.cast(batch["label_mask"], tf.float32))}


def _sums(outputs, batch):
  sums = losses.masked_lm_sums(tf.cast(outputs["logits"], tf.float32), batch["label_ids"],
                               batch["label_mask"])
  if PACKED_INPUTS[0] in batch:  # packed rows: a row's slots are 1..n
    sums["examples"] = tf.cast(tf.reduce_sum(tf.reduce_max(batch["input_mask"], axis=-1)),
                               tf.float32)
  else:
    sums["examples"] = tf.cast(tf.shape(batch["label_ids"])[0], tf.float32)
  return sums


def replica_loss(outputs, batch, global_normalizers, examples_per_update):
  """Summed cross-entropy of this replica's labelled positions / all labelled positions of the
  global batch, and the metric sums."""
  del examples_per_update
  sums = _sums(outputs, batch)
  loss = sums["nll"] / tf.maximum(global_normalizers["label_weight"], 1.0)
  return loss, dict(correct=sums["correct"], weight=sums["weight"], examples=sums["examples"])


def train_metrics(totals: Mapping[str, float], good_steps: int) -> Dict[str, float]:
  return dict(loss=totals["loss"] / good_steps,
              token_accuracy=totals["correct"] / max(totals["weight"], 1.0))


def eval_sums(outputs, batch):
  return _sums(outputs, batch)


def eval_results(batch_sums: List[Mapping[str, Any]]) -> Dict[str, float]:
  total = evaluation.sum_batches(batch_sums)
  weight = max(total["weight"], 1.0)
  return dict(eval_loss=total["nll"] / weight, eval_token_accuracy=total["correct"] / weight)


TASK = loop.Task(model_inputs=model_inputs, normalizers=normalizers, replica_loss=replica_loss,
                 sum_names=("correct", "weight", "examples"), train_metrics=train_metrics,
                 eval_sums=eval_sums, eval_results=eval_results)


def distillation_task(teacher_outputs, temperature: float, alpha: float) -> loop.Task:
  """TASK learning from a teacher, per token: alpha x the cross-entropy to the tag + (1 - alpha)
  x the soft loss at temperature T (scaled by T^2), at the positions the tagger's own loss
  counts (label_mask 1: each word's first piece; padding and the other pieces weigh 0), over
  the global count of those positions; the metric sums stay the task's.

  A position whose label id is negative (a --transfer_file word, tagging_data.UNLABELLED_ID)
  has no hard loss and counts in no metric sum; its soft loss counts.

  Args:
    teacher_outputs: batch -> the teacher's outputs ({"logits": [B, S, C]}) on the same batch.
    temperature: T > 0.
    alpha: the hard loss's weight in [0, 1].
  """

  def distilled_loss(outputs, batch, global_normalizers, examples_per_update):
    teacher = teacher_outputs(batch)
    label_ids = tf.cast(batch["label_ids"], tf.int32)
    labelled = tf.cast(label_ids >= 0, tf.float32)
    label_ids = tf.maximum(label_ids, 0)
    per_position = predictions.tagger_loss(
        outputs["logits"], teacher["logits"], label_ids, batch["label_mask"], temperature,
        alpha, hard_weights=labelled)
    loss = tf.reduce_sum(per_position) / tf.maximum(global_normalizers["label_weight"], 1.0)
    labelled_batch = dict(batch, label_ids=label_ids,
                          label_mask=tf.cast(batch["label_mask"], tf.float32) * labelled)
    _, sums = replica_loss(outputs, labelled_batch, global_normalizers, examples_per_update)
    return loss, sums

  return TASK._replace(replica_loss=distilled_loss)
