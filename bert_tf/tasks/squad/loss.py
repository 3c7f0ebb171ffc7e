"""SQuAD's loss as a task of the generic loop: the original run_squad.py's span loss and sums.

The model is head.build_span_model (the head's dense layer, "squad_logits", is the original's
cls/squad/output_weights [2, H] and output_bias in the checkpoint name table). The original's
loss (run_squad.py:model_fn): for the start and the end separately, the mean over the batch of
-log softmax(logits over all S positions)[gold position]; the total is their average. Here it is
summed per replica and divided by the global batch, so replicas and gradient accumulation give
the same update. Training batches carry start_positions and end_positions (0 = [CLS] for a window
without the answer or an impossible question).

Packed rows (--packing): each window's softmax is over its own positions only (span_logits):
the original's includes the padding positions of its row, which a shared row cannot give, so
packed training equals an unpacked one whose softmax masks padding, not the original's loss
(predictions read real positions only and are the same either way).

The original has no evaluation mode for SQuAD (evaluation is the official script on
predictions.json, see squad_metrics); eval_sums here give the same loss and the start/end
accuracy on records with positions, for a held-out training file.
"""

from typing import Any, Dict, List, Mapping

import tensorflow as tf

from bert_tf.model.encoder import ENCODER_INPUTS, PACKED_INPUTS
from bert_tf.training import evaluation
from bert_tf.training import input_pipeline
from bert_tf.training import loop
from bert_tf.training import losses
from bert_tf.training import packed_rows
from bert_tf.training.distillation import predictions


def model_inputs(batch):
  """The model's inputs of a batch: the encoder's, and input_position_ids for packed rows."""
  return {key: batch[key] for key in ENCODER_INPUTS + PACKED_INPUTS[:1] if key in batch}


def _packed(batch) -> bool:
  return packed_rows.is_packed(batch)


def _weights(batch):
  """Packed rows: 1 for a slot holding a window (unique_ids count from 1000000000), 0 for an
  empty one; None for unpacked batches (every row is a window)."""
  if not _packed(batch):
    return None
  return tf.cast(tf.reshape(batch["unique_ids"], [-1]) != 0, tf.float32)


def normalizers(batch):
  """Packed rows: the batch's windows, summed by the loop over the update (train_batch_size
  with exact packing, varying with static packing); none otherwise."""
  if not _packed(batch):
    return {}
  return {"examples": tf.reduce_sum(_weights(batch))}


def span_logits(outputs, batch, side: str):
  """float32 [N, S] start or end logits of each window: the model's for unpacked rows (every
  position, padding included, as the original's softmax); for packed rows each window's own
  positions from its [CLS] on, and PADDED_LOGIT past its end, so its softmax is over its real
  positions only (packed_rows.unpack_positions)."""
  logits = outputs[f"{side}_logits"]
  if _packed(batch):
    logits = packed_rows.unpack_positions(logits, batch, input_pipeline.PADDED_LOGIT)
  return tf.cast(logits, tf.float32)


def _position_sums(outputs, batch, labelled=None):
  """The loss and accuracy sums of a batch's windows; `labelled` ([N] 0/1): only the windows
  with gold positions count (a --transfer_file window has none)."""
  sums = {}
  weights = _weights(batch)
  if labelled is not None:
    weights = labelled if weights is None else weights * labelled
  for side in ("start", "end"):
    logits = span_logits(outputs, batch, side)
    positions = tf.reshape(tf.cast(batch[f"{side}_positions"], tf.int32), [-1])
    nll, correct = losses.sparse_nll(logits, positions), losses.correct(logits, positions)
    if weights is not None:
      nll, correct = nll * weights, correct * weights
    sums[f"{side}_nll"] = tf.reduce_sum(nll)
    sums[f"{side}_correct"] = tf.reduce_sum(correct)
  sums["examples"] = (tf.cast(tf.shape(outputs["start_logits"])[0], tf.float32)
                      if weights is None else tf.reduce_sum(weights))
  return sums


def replica_loss(outputs, batch, global_normalizers, examples_per_update):
  """(start loss + end loss) / 2 over the global batch (this replica's share), and its sums."""
  sums = _position_sums(outputs, batch)
  denominator = (tf.maximum(global_normalizers["examples"], 1.0)
                 if "examples" in global_normalizers else float(examples_per_update))
  loss = (sums["start_nll"] + sums["end_nll"]) / (2.0 * denominator)
  return loss, dict(start_correct=sums["start_correct"], end_correct=sums["end_correct"],
                    examples=sums["examples"])


def train_metrics(totals: Mapping[str, float], good_steps: int) -> Dict[str, float]:
  examples = max(totals["examples"], 1.0)
  return dict(loss=totals["loss"] / good_steps,
              start_accuracy=totals["start_correct"] / examples,
              end_accuracy=totals["end_correct"] / examples)


def eval_sums(outputs, batch):
  return _position_sums(outputs, batch)


def eval_results(batch_sums: List[Mapping[str, Any]]) -> Dict[str, float]:
  total = evaluation.sum_batches(batch_sums)
  examples = max(total["examples"], 1.0)
  return dict(eval_loss=(total["start_nll"] + total["end_nll"]) / (2.0 * examples),
              eval_start_accuracy=total["start_correct"] / examples,
              eval_end_accuracy=total["end_correct"] / examples)


TASK = loop.Task(model_inputs=model_inputs, normalizers=normalizers, replica_loss=replica_loss,
                 sum_names=("start_correct", "end_correct", "examples"),
                 train_metrics=train_metrics, eval_sums=eval_sums, eval_results=eval_results)


def distillation_task(teacher_outputs, temperature: float, alpha: float) -> loop.Task:
  """TASK learning from a teacher, per start and end position: for each, alpha x the
  cross-entropy to the gold position + (1 - alpha) x the soft loss at temperature T (scaled by
  T^2) over the same positions (span_logits: every position of an unpacked row, a window's own
  positions in packed rows), averaged over start and end and the global batch; the metric sums
  stay the task's.

  A window whose gold positions are negative (a --transfer_file question,
  run.UNLABELLED_POSITION) has no hard loss and counts in no accuracy; its soft loss counts,
  and it counts in the examples.

  Args:
    teacher_outputs: batch -> the teacher's outputs ({"start_logits", "end_logits"}).
    temperature: T > 0.
    alpha: the hard loss's weight in [0, 1].
  """

  def distilled_loss(outputs, batch, global_normalizers, examples_per_update):
    teacher = teacher_outputs(batch)
    student_logits = [span_logits(outputs, batch, side) for side in ("start", "end")]
    teacher_logits = [span_logits(teacher, batch, side) for side in ("start", "end")]
    positions = [tf.reshape(tf.cast(batch[f"{side}_positions"], tf.int32), [-1])
                 for side in ("start", "end")]
    labelled = tf.cast(positions[0] >= 0, tf.float32)
    positions = [tf.maximum(p, 0) for p in positions]
    per_window = predictions.span_loss(*student_logits, *teacher_logits, *positions,
                                       temperature, alpha, hard_weights=labelled)
    weights = _weights(batch)
    if weights is not None:
      per_window *= weights
    denominator = (tf.maximum(global_normalizers["examples"], 1.0)
                   if "examples" in global_normalizers else float(examples_per_update))
    labelled_batch = dict(batch, start_positions=positions[0], end_positions=positions[1])
    sums = _position_sums(outputs, labelled_batch, labelled)
    every = (tf.cast(tf.size(labelled), tf.float32) if weights is None
             else tf.reduce_sum(weights))
    sums = dict(start_correct=sums["start_correct"], end_correct=sums["end_correct"],
                labelled=sums["examples"], examples=every)
    return tf.reduce_sum(per_window) / denominator, sums

  return TASK._replace(replica_loss=distilled_loss,
                       sum_names=TASK.sum_names + ("labelled",),
                       train_metrics=_distilled_train_metrics)


def _distilled_train_metrics(totals: Mapping[str, float], good_steps: int) -> Dict[str, float]:
  """train_metrics over the windows with gold positions (a --transfer_file window has none)."""
  return train_metrics(dict(totals, examples=totals["labelled"]), good_steps)
