"""bert_tf.tasks.classifier.loss: the original's classifier head, its checkpoint names, its task."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.tasks.classifier import loss as classifier
from bert_tf.training import distribution, evaluation, loop, run_folder
from bert_tf.training import optimization
from bert_tf.tasks.classifier import head as classifier_head
from tests.helpers import ODD_CONFIG, random_inputs, random_original_weights, ref_encoder


def _fine_tuned_weights(rng, num_labels):
  values = random_original_weights(ODD_CONFIG, rng, heads=False)
  values["output_weights"] = rng.normal(0, 0.5, (num_labels, ODD_CONFIG.hidden_size)).astype(
      np.float32)
  values["output_bias"] = rng.normal(0, 0.5, num_labels).astype(np.float32)
  return values


def test_a_classifier_fine_tuned_by_the_original_loads_and_gives_its_logits(tmp_path):
  rng = np.random.default_rng(0)
  values = _fine_tuned_weights(rng, 3)
  prefix = checkpoints.write_tf1_checkpoint(values, str(tmp_path / "model.ckpt-100"))
  model = classifier_head.build_classifier_model(ODD_CONFIG, num_labels=3)
  report = checkpoints.load_weights(model, prefix, strict=True)
  assert not report.missing and not report.unexpected and not report.mismatched
  ids, mask, types, _ = random_inputs(ODD_CONFIG, rng)
  got = model(dict(input_word_ids=ids, input_mask=mask, input_type_ids=types),
              training=False)["logits"].numpy()
  _, pooled, _ = ref_encoder(values, ODD_CONFIG, ids, mask, types)
  # create_model: logits = pooled @ output_weights^T + output_bias (dropout off at inference).
  want = pooled @ values["output_weights"].T.astype(np.float64) + values["output_bias"]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  # And back: ours converts to the original's names and layouts.
  back = checkpoints.get_original_weights(model)
  np.testing.assert_array_equal(back["output_weights"], values["output_weights"])
  np.testing.assert_array_equal(back["output_bias"], values["output_bias"])


def test_regression_head_has_one_output_and_labels_are_checked():
  model = classifier_head.build_classifier_model(ODD_CONFIG, num_labels=None)
  assert model.get_layer("classifier").units == 1
  with pytest.raises(ValueError, match="at least 2 labels"):
    classifier_head.build_classifier_model(ODD_CONFIG, num_labels=1)


def _numpy_scores(labels, predictions):
  tp = np.sum((labels == 1) & (predictions == 1))
  fp = np.sum((labels != 1) & (predictions == 1))
  fn = np.sum((labels == 1) & (predictions != 1))
  tn = np.sum((labels != 1) & (predictions != 1))
  f1 = 2 * tp / (2 * tp + fp + fn)
  mcc = (tp * tn - fp * fn) / np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
  return f1, mcc


def test_eval_sums_and_results_match_direct_computation_and_skip_padding():
  rng = np.random.default_rng(1)
  batches, all_labels, all_predictions, all_nll = [], [], [], []
  for _ in range(3):
    logits = rng.normal(0, 2, (8, 2)).astype(np.float32)
    labels = rng.integers(0, 2, 8).astype(np.int32)
    real = np.array([1] * 6 + [0] * 2)  # two TPU padding examples per batch
    sums = classifier.eval_sums({"logits": tf.constant(logits)},
                                {"label_ids": tf.constant(labels),
                                 "is_real_example": tf.constant(real)})
    batches.append({k: v.numpy() for k, v in sums.items()})
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    all_nll += list(-log_probs[np.arange(6), labels[:6]])
    all_labels += list(labels[:6])
    all_predictions += list(np.argmax(logits[:6], -1))
  results = classifier.eval_results(batches)
  labels, predictions = np.array(all_labels), np.array(all_predictions)
  f1, mcc = _numpy_scores(labels, predictions)
  assert results["eval_accuracy"] == pytest.approx(np.mean(labels == predictions))
  assert results["eval_loss"] == pytest.approx(np.mean(all_nll), rel=1e-5)
  assert results["eval_f1"] == pytest.approx(f1) and results["eval_matthews_corrcoef"] == pytest.approx(mcc)


def test_regression_eval_results_are_mse_and_pearson():
  rng = np.random.default_rng(2)
  p = rng.normal(2, 1, 40).astype(np.float32)
  t = (p + rng.normal(0, 0.5, 40)).astype(np.float32)
  batches = [{k: v.numpy() for k, v in classifier.regression_eval_sums(
      {"logits": tf.constant(p[i:i + 10, None])}, {"label_ids": tf.constant(t[i:i + 10])}
  ).items()} for i in range(0, 40, 10)]
  results = classifier.regression_eval_results(batches)
  assert results["eval_loss"] == pytest.approx(np.mean((p - t) ** 2), rel=1e-5)
  assert results["eval_pearson"] == pytest.approx(np.corrcoef(p, t)[0, 1], rel=1e-4)


@pytest.mark.slow
def test_the_classifier_learns_through_the_generic_loop(tmp_path):
  # Label = whether token 7 occurs in the sequence: learnable from the pooled output. The
  # initial weights are seeded, so the run does not depend on what this worker ran before. 120
  # steps: at 60, 3 of 200 initial-weight seeds had not learned it yet (one still at ln 2).
  keras.utils.set_random_seed(3)
  rng = np.random.default_rng(3)
  config = ODD_CONFIG.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  n, seq = 256, 8
  ids = rng.integers(8, config.vocab_size, (n, seq)).astype(np.int32)
  labels = rng.integers(0, 2, n).astype(np.int32)
  ids[labels == 1, rng.integers(1, seq, int(labels.sum()))] = 7
  ids[:, 0] = 2
  data = dict(input_word_ids=ids, input_mask=np.ones_like(ids), input_type_ids=np.zeros_like(ids),
              label_ids=labels, is_real_example=np.ones(n, np.int32))
  dataset = tf.data.Dataset.from_tensor_slices(data).repeat().batch(32, drop_remainder=True)
  strategy = distribution.select_strategy("one_device")
  steps = 120
  with strategy.scope():
    model = classifier_head.build_classifier_model(config, num_labels=2)
    optimizer = optimization.create_optimizer("adamw", 1e-3, steps, 12)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
  trainer = loop.Trainer(strategy, model, optimizer, classifier.TASK, train_batch_size=32)
  state = run_folder.checkpoint_state(model, optimizer, step, str(tmp_path), True, strategy)
  loop.train(trainer, iter(strategy.experimental_distribute_dataset(dataset)), step,
             state.manager, steps, 20, steps, None, True)
  eval_data = tf.data.Dataset.from_tensor_slices(data).batch(64)
  results = evaluation.evaluate(trainer, iter(eval_data), 4, steps, str(tmp_path), True)
  weights = {v.path: float(np.abs(v.numpy()).max()) for v in model.trainable_variables[:3]}
  assert results["eval_accuracy"] > 0.9, (results, int(step.numpy()), weights)
  assert (tmp_path / evaluation.EVAL_RESULTS_FILE).exists()
