"""Classification as a task of the generic loop: the original run_classifier.py's loss and sums.

`head.build_classifier_model(config, num_labels)` (registered with the model tier, so that
checkpoints of every task are read by one reader) is the original's create_model: the encoder's
pooled output, dropout (the config's hidden_dropout_prob, 0.1 for the released models), and one
dense layer to the label logits. The dense layer is named "classifier", which the head's
registration maps to the original's root-scope `output_weights` [num_labels, H] and
`output_bias`, so a classifier fine-tuned with the original loads here and ours converts to the
original's names.
`num_labels=None` is a regression head (one output, mean squared error), for STS-B.

`TASK` / `REGRESSION_TASK` plug the loss and metrics into the generic loop (training.loop):
the original's loss is the mean cross-entropy over the batch (run_classifier.py:create_model),
here summed per replica and divided by the global batch, so replicas and accumulation give the
same update. Eval counts only real examples (is_real_example; TPU padding examples weigh 0),
and the sums include the binary confusion counts, from which eval_results derives accuracy,
loss, F1 and the Matthews correlation (classifier_metrics) without keeping per-example
predictions.

Batches carry the models' input names (input_word_ids, input_mask, input_type_ids) plus
label_ids and is_real_example. Packed rows (--packing) add input_position_ids and
packed_cls_positions, the logits and the per-example features come one per slot of the rows
(empty slots weigh 0), and the loss is averaged over the update's real examples (the loop's
normalizers), which is train_batch_size with exact packing.
"""

from typing import Any, Dict, List, Mapping

import numpy as np
import tensorflow as tf

from bert_tf.model.encoder import ENCODER_INPUTS, PACKED_INPUTS
from bert_tf.tasks.classifier import metrics as classifier_metrics
from bert_tf.training import evaluation
from bert_tf.training import loop
from bert_tf.training import losses
from bert_tf.training.distillation import predictions

# === The task (classification) ===


def model_inputs(batch):
  """The model's inputs of a batch: the encoder's, and those of packed rows when it has them."""
  return {key: batch[key] for key in ENCODER_INPUTS + PACKED_INPUTS if key in batch}


def normalizers(batch):
  """Packed rows: the batch's real examples, which vary per step with static packing (the
  loop sums them over the replicas and micro-batches of the update); none otherwise."""
  if PACKED_INPUTS[0] not in batch:
    return {}
  return {"examples": tf.reduce_sum(_weights(batch))}


def _denominator(global_normalizers, examples_per_update):
  """The examples a loss is averaged over: the update's real examples for packed rows (equal
  to train_batch_size with exact packing), else train_batch_size, as the original."""
  if "examples" in global_normalizers:
    return tf.maximum(global_normalizers["examples"], 1.0)
  return float(examples_per_update)


def _weights(batch):
  if "is_real_example" in batch:
    return tf.cast(tf.reshape(batch["is_real_example"], [-1]), tf.float32)
  return tf.ones_like(tf.cast(tf.reshape(batch["label_ids"], [-1]), tf.float32))


def replica_loss(outputs, batch, global_normalizers, examples_per_update):
  """Mean cross-entropy over the global batch (this replica's share), and its metric sums."""
  logits = tf.cast(outputs["logits"], tf.float32)
  labels = tf.reshape(tf.cast(batch["label_ids"], tf.int32), [-1])
  weights = _weights(batch)
  nll = losses.sparse_nll(logits, labels)
  loss = tf.reduce_sum(weights * nll) / _denominator(global_normalizers, examples_per_update)
  return loss, dict(correct=tf.reduce_sum(weights * losses.correct(logits, labels)),
                    examples=tf.reduce_sum(weights))


def train_metrics(totals: Mapping[str, float], good_steps: int) -> Dict[str, float]:
  return dict(loss=totals["loss"] / good_steps,
              accuracy=totals["correct"] / max(totals["examples"], 1.0))


def eval_sums(outputs, batch):
  """Sums over the real examples of one batch; binary confusion counts when there are 2 labels."""
  logits = tf.cast(outputs["logits"], tf.float32)
  labels = tf.reshape(tf.cast(batch["label_ids"], tf.int32), [-1])
  weights = _weights(batch)
  sums = dict(nll=tf.reduce_sum(weights * losses.sparse_nll(logits, labels)),
              correct=tf.reduce_sum(weights * losses.correct(logits, labels)),
              examples=tf.reduce_sum(weights))
  if logits.shape[-1] == 2:
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    positive, predicted = tf.equal(labels, 1), tf.equal(predictions, 1)
    for key, hit in (("tp", positive & predicted), ("fp", ~positive & predicted),
                     ("fn", positive & ~predicted), ("tn", ~positive & ~predicted)):
      sums[key] = tf.reduce_sum(weights * tf.cast(hit, tf.float32))
  return sums


def _mean_of_batch_means(batch_sums, key):
  means = [float(b[key]) / float(b["examples"]) for b in batch_sums if float(b["examples"]) > 0]
  return sum(means) / max(len(means), 1)


def eval_results(batch_sums: List[Mapping[str, Any]]) -> Dict[str, float]:
  """The original's eval_accuracy, eval_loss and loss; with two labels also eval_f1 (of label
  1) and eval_matthews_corrcoef (CoLA reports MCC, MRPC and QQP F1 and accuracy).

  The original's `loss` (the Estimator's) is the mean of the per-batch mean losses; eval_loss
  is the mean over all real examples (tf.metrics.mean with is_real_example weights).
  """
  total = evaluation.sum_batches(batch_sums)
  examples = max(total["examples"], 1.0)
  results = dict(eval_accuracy=total["correct"] / examples, eval_loss=total["nll"] / examples,
                 loss=_mean_of_batch_means(batch_sums, "nll"))
  if "tp" in total:
    results.update(classifier_metrics.binary_scores(total["tp"], total["fp"], total["fn"],
                                                    total["tn"]))
  return results


TASK = loop.Task(model_inputs=model_inputs, normalizers=normalizers, replica_loss=replica_loss,
                 sum_names=("correct", "examples"), train_metrics=train_metrics,
                 eval_sums=eval_sums, eval_results=eval_results)


# === The task (regression) ===


def regression_loss(outputs, batch, global_normalizers, examples_per_update):
  """Mean squared error over the global batch (this replica's share)."""
  predictions = tf.reshape(tf.cast(outputs["logits"], tf.float32), [-1])
  targets = tf.reshape(tf.cast(batch["label_ids"], tf.float32), [-1])
  weights = _weights(batch)
  squared = tf.reduce_sum(weights * tf.square(predictions - targets))
  return squared / _denominator(global_normalizers, examples_per_update), dict(
      squared_error=squared, examples=tf.reduce_sum(weights))


def regression_train_metrics(totals: Mapping[str, float], good_steps: int) -> Dict[str, float]:
  return dict(loss=totals["loss"] / good_steps,
              mse=totals["squared_error"] / max(totals["examples"], 1.0))


def regression_eval_sums(outputs, batch):
  """Moments of predictions p and targets t over the real examples (for MSE and Pearson)."""
  p = tf.reshape(tf.cast(outputs["logits"], tf.float32), [-1])
  t = tf.reshape(tf.cast(batch["label_ids"], tf.float32), [-1])
  w = _weights(batch)
  return dict(examples=tf.reduce_sum(w), squared_error=tf.reduce_sum(w * tf.square(p - t)),
              p=tf.reduce_sum(w * p), t=tf.reduce_sum(w * t), pp=tf.reduce_sum(w * p * p),
              tt=tf.reduce_sum(w * t * t), pt=tf.reduce_sum(w * p * t))


def regression_eval_results(batch_sums: List[Mapping[str, Any]]) -> Dict[str, float]:
  """eval_loss (MSE over the real examples), loss (mean of batch MSEs) and Pearson's r."""
  s = evaluation.sum_batches(batch_sums)
  return dict(eval_loss=s["squared_error"] / max(s["examples"], 1.0),
              loss=_mean_of_batch_means(batch_sums, "squared_error"),
              eval_pearson=classifier_metrics.pearson_from_sums(s))


REGRESSION_TASK = loop.Task(model_inputs=model_inputs, normalizers=normalizers,
                            replica_loss=regression_loss, sum_names=("squared_error", "examples"),
                            train_metrics=regression_train_metrics,
                            eval_sums=regression_eval_sums, eval_results=regression_eval_results)


# === Distillation (--teacher) ===


def distillation_task(teacher_outputs, temperature: float, alpha: float,
                      regression: bool = False) -> loop.Task:
  """TASK (or REGRESSION_TASK) learning from a teacher: per example, alpha x the task's loss +
  (1 - alpha) x the soft loss (cross-entropy to the teacher's probabilities at temperature T,
  scaled by T^2; regression: squared error to the teacher's score), over the same examples and
  denominator as the task's own loss; the metric sums stay the task's.

  Args:
    teacher_outputs: batch -> the teacher's outputs ({"logits": ...}) on the same batch (the
      frozen teacher in the step, or its cached outputs). Examples whose label id is -1
      (transfer examples: classifier_data.UNLABELLED_ID) have no hard loss.
    temperature: T > 0.
    alpha: the hard loss's weight in [0, 1].
    regression: a regression head.
  """
  base = REGRESSION_TASK if regression else TASK

  def replica_loss(outputs, batch, global_normalizers, examples_per_update):
    teacher = teacher_outputs(batch)
    labels = batch["label_ids"]
    if regression:
      per_example = predictions.regression_loss(outputs["logits"], teacher["logits"], labels,
                                                alpha)
      labelled_batch = batch
    else:
      # Transfer examples (label id UNLABELLED_ID, -1) train on the soft targets only, and
      # count in no metric sum.
      labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
      labelled = tf.cast(labels >= 0, tf.float32)
      labels = tf.maximum(labels, 0)
      per_example = predictions.classifier_loss(outputs["logits"], teacher["logits"], labels,
                                                temperature, alpha, hard_weights=labelled)
      labelled_batch = dict(batch, label_ids=labels, is_real_example=_weights(batch) * labelled)
    loss = tf.reduce_sum(_weights(batch) * per_example) / _denominator(global_normalizers,
                                                                        examples_per_update)
    _, sums = base.replica_loss(outputs, labelled_batch, global_normalizers, examples_per_update)
    if not regression:  # examples/s counts every example, the accuracy the labelled ones
      sums = dict(sums, labelled=sums["examples"], examples=tf.reduce_sum(_weights(batch)))
    return loss, sums

  if regression:
    return base._replace(replica_loss=replica_loss)
  return base._replace(replica_loss=replica_loss, sum_names=base.sum_names + ("labelled",),
                       train_metrics=_distilled_train_metrics)


def _distilled_train_metrics(totals: Mapping[str, float], good_steps: int) -> Dict[str, float]:
  return dict(loss=totals["loss"] / good_steps,
              accuracy=totals["correct"] / max(totals["labelled"], 1.0))


# === Metrics from per-example predictions ===


def results_from_predictions(logits: np.ndarray, labels: np.ndarray, batch_size: int,
                             regression: bool = False) -> Dict[str, float]:
  """eval_results from the real examples' logits and labels in file order.

  The examples are grouped into batches of batch_size as the original's eval input_fn reads
  them (which matters for its `loss`, a mean of batch means), then go through the task's own
  eval_sums and eval_results; regression adds eval_spearman, which needs every prediction.
  """
  task = REGRESSION_TASK if regression else TASK
  batch_sums = []
  for start in range(0, len(labels), batch_size):
    chunk = {"label_ids": tf.constant(labels[start:start + batch_size])}
    sums = task.eval_sums({"logits": tf.constant(logits[start:start + batch_size])}, chunk)
    batch_sums.append({k: v.numpy() for k, v in sums.items()})
  if not batch_sums:
    raise ValueError("no example to evaluate")
  results = task.eval_results(batch_sums)
  if regression:
    results["eval_spearman"] = classifier_metrics.spearman(np.reshape(logits, [-1]),
                                                           np.reshape(labels, [-1]))
  return results
