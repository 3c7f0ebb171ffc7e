"""The model half of the original run_squad.py: the span labeler's loss for the generic loop.

The model is heads.build_span_model (the head's dense layer, "squad_logits", is the original's
cls/squad/output_weights [2, H] and output_bias in the checkpoint name table). The original's
loss (run_squad.py:model_fn): for the start and the end separately, the mean over the batch of
-log softmax(logits over all S positions)[gold position]; the total is their average. Here it is
summed per replica and divided by the global batch, so replicas and gradient accumulation give
the same update. Training batches carry start_positions and end_positions (0 = [CLS] for a window
without the answer or an impossible question).

The original has no evaluation mode for SQuAD (evaluation is the official script on
predictions.json, see squad_metrics); eval_sums here give the same loss and the start/end
accuracy on records with positions, for a held-out training file.
"""

from typing import Any, Dict, List, Mapping

import tensorflow as tf

from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.training import loop
from bert_tf.training import losses


def model_inputs(batch):
  return {key: batch[key] for key in ENCODER_INPUTS}


def normalizers(batch):
  del batch
  return {}


def _position_sums(outputs, batch):
  sums = {}
  for side in ("start", "end"):
    logits = tf.cast(outputs[f"{side}_logits"], tf.float32)
    positions = tf.reshape(tf.cast(batch[f"{side}_positions"], tf.int32), [-1])
    sums[f"{side}_nll"] = tf.reduce_sum(losses.sparse_nll(logits, positions))
    sums[f"{side}_correct"] = tf.reduce_sum(losses.correct(logits, positions))
  sums["examples"] = tf.cast(tf.shape(outputs["start_logits"])[0], tf.float32)
  return sums


def replica_loss(outputs, batch, global_normalizers, examples_per_update):
  """(start loss + end loss) / 2 over the global batch (this replica's share), and its sums."""
  del global_normalizers
  sums = _position_sums(outputs, batch)
  loss = (sums["start_nll"] + sums["end_nll"]) / (2.0 * float(examples_per_update))
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
  total = loop.sum_batches(batch_sums)
  examples = max(total["examples"], 1.0)
  return dict(eval_loss=(total["start_nll"] + total["end_nll"]) / (2.0 * examples),
              eval_start_accuracy=total["start_correct"] / examples,
              eval_end_accuracy=total["end_correct"] / examples)


TASK = loop.Task(model_inputs=model_inputs, normalizers=normalizers, replica_loss=replica_loss,
                 sum_names=("start_correct", "end_correct", "examples"),
                 train_metrics=train_metrics, eval_sums=eval_sums, eval_results=eval_results)
