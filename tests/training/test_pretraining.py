"""Tests of bert_tf.training.pretraining on the generic loop: training, resume, eval results,
accumulation, precision, init checkpoints, the export step, errors.

Everything runs on a tiny model (L=2, H=64, A=2, I=37, vocab 64) and tiny records written here
(sequence 16, 3 predictions), with dropout off so that runs can be compared number for number.
"""

import logging
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model.heads import PRETRAINING_INPUTS, build_pretraining_model
from bert_tf.serving import saved_model
from bert_tf.training import evaluation, loop
from bert_tf.training import input_pipeline
from bert_tf.training import pretraining
from bert_tf.training.errors import TrainingError
from tests import helpers
from tests.helpers import (PREDS, SEQ, VOCAB_TOKENS, assert_same_weights, checkpoint_values,
                           optimizer_values, tiny_config, tiny_settings,
                           write_vocab)

@pytest.fixture(scope="module")
def full_run(data, tmp_path_factory):
  """6 steps with checkpoints at 2, 4, 6, then 10 eval steps and the export (shared)."""
  output_dir = str(tmp_path_factory.mktemp("full"))
  vocab = write_vocab(os.path.join(output_dir, "vocab.txt"))
  result = pretraining.run_pretraining(tiny_config(), tiny_settings(
      data, output_dir, do_eval=True, max_eval_steps=10, export_at_end=True, vocab_file=vocab),
      exporter=saved_model.EXPORTER)
  return output_dir, result


def _summary_points(pattern):
  """{tag: [(step, value)]} of the TensorBoard event files matching pattern, by step."""
  points = {}
  for path in tf.io.gfile.glob(pattern):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        number = (value.simple_value if value.HasField("simple_value")
                  else float(tf.make_ndarray(value.tensor)))
        points.setdefault(value.tag, []).append((event.step, number))
  return {tag: sorted(values) for tag, values in points.items()}


@pytest.mark.slow
def test_training_lowers_eval_loss_and_raises_accuracy(data, tmp_path, monkeypatch, caplog):
  config = tiny_config()
  before = pretraining.run_pretraining(config, tiny_settings(
      data, str(tmp_path / "before"), do_train=False, do_eval=True))
  # Count the model builds and the traces of the eval step (its Python body runs only when
  # traced) of the run that also evaluates every 20 steps.
  builds, traces = [], []
  build = pretraining.build_pretraining_model
  monkeypatch.setattr(pretraining, "build_pretraining_model",
                      lambda *a, **k: builds.append(1) or build(*a, **k))
  eval_step_fn = loop.Trainer._eval_step_fn
  monkeypatch.setattr(loop.Trainer, "_eval_step_fn",
                      lambda self, iterator: traces.append(1) or eval_step_fn(self, iterator))
  with caplog.at_level(logging.INFO):
    after = pretraining.run_pretraining(config, tiny_settings(
        data, str(tmp_path / "after"), do_eval=True, num_train_steps=60,
        iterations_per_loop=20, save_checkpoints_steps=60, eval_every_n_steps=20))
  assert before["global_step"] == 0 and after["global_step"] == 60
  assert after["loss"] < before["loss"] - 0.5, (before["loss"], after["loss"])
  assert after["masked_lm_loss"] < before["masked_lm_loss"] - 0.3
  # The next-sentence rule (short A <=> random next) is learnable within 60 steps.
  assert after["next_sentence_accuracy"] > 0.75
  # TensorBoard summaries of the logged metrics, one point per tf.function call (3 x 20 steps).
  points = _summary_points(str(tmp_path / "after" / "events.out.tfevents.*"))
  assert {tag: [s for s, _ in values] for tag, values in points.items()} == {
      tag: [20, 40, 60] for tag in ("loss", "masked_lm_accuracy", "next_sentence_accuracy",
                                    "learning_rate", "examples_per_second")}
  # --eval_every_n_steps: evaluations at 20, 40 and 60 on the same eval batches; the final
  # --do_eval is the one of step 60 (not run again), one model and one eval trace for all.
  evaluations = after["evaluations"]
  assert sorted(evaluations) == [20, 40, 60]
  assert evaluations[20]["masked_lm_loss"] > evaluations[60]["masked_lm_loss"]
  assert {k: after[k] for k in evaluations[60]} == evaluations[60]
  assert len(builds) == 1 and len(traces) == 1, (builds, traces)
  assert evaluation.read_eval_results(str(tmp_path / "after" / "eval_results.txt")) == \
      pytest.approx(evaluations[60])
  eval_points = _summary_points(str(tmp_path / "after" / "eval" / "events.out.tfevents.*"))
  for tag in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "loss"):
    assert eval_points[tag] == [(step, pytest.approx(evaluations[step][tag], rel=1e-6))
                                for step in (20, 40, 60)], tag
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("eval at step")]
  assert [line.split(":")[0] for line in lines] == [f"eval at step {s}" for s in (20, 40, 60)]
  assert f"masked_lm_accuracy = {evaluations[40]['masked_lm_accuracy']:.4f}" in lines[1]
  assert "off the training clock" in lines[0]
  assert any(re.match(r"eval 4/4 batches, [0-9.]+ batches/s \(first [0-9.]+ s\), ETA 0:00:00",
                      r.getMessage()) for r in caplog.records)


@pytest.mark.slow
def test_resume_gives_the_same_weights_as_an_uninterrupted_run(data, full_run, tmp_path):
  config = tiny_config()
  full_dir, full = full_run
  assert full["global_step"] == 6
  assert [os.path.basename(p) for p in tf.train.get_checkpoint_state(
      full_dir).all_model_checkpoint_paths] == ["ckpt-2", "ckpt-4", "ckpt-6"]
  # An interrupted run: only the checkpoint of step 4 survived.
  resumed_dir = tmp_path / "resumed"
  resumed_dir.mkdir()
  for name in os.listdir(full_dir):
    if name.startswith("ckpt-4."):
      shutil.copy(os.path.join(full_dir, name), resumed_dir / name)
  (resumed_dir / "checkpoint").write_text(
      'model_checkpoint_path: "ckpt-4"\nall_model_checkpoint_paths: "ckpt-4"\n')
  resumed = pretraining.run_pretraining(config, tiny_settings(data, str(resumed_dir)))
  assert resumed["global_step"] == 6
  assert tf.train.latest_checkpoint(str(resumed_dir)).endswith("ckpt-6")
  assert_same_weights(checkpoint_values(os.path.join(full_dir, "ckpt-6")),
                      checkpoint_values(str(resumed_dir / "ckpt-6")))
  # Optimizer slots and the step came back too.
  reader = tf.train.load_checkpoint(str(resumed_dir / "ckpt-6"))
  assert int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")) == 6
  full_optimizer = optimizer_values(os.path.join(full_dir, "ckpt-6"))
  resumed_optimizer = optimizer_values(str(resumed_dir / "ckpt-6"))
  assert sorted(full_optimizer) == sorted(resumed_optimizer) and len(full_optimizer) > 90
  for name, value in full_optimizer.items():
    np.testing.assert_allclose(resumed_optimizer[name], value, rtol=1e-5, atol=1e-7,
                               err_msg=name)


def _reference_eval(model, data, batch_size, steps):
  """The original's eval metrics computed with helpers.pretraining_metrics, batch by batch."""
  dataset = input_pipeline.pretraining_dataset(data, SEQ, PREDS, batch_size, is_training=False,
                                               repeat=True).take(steps)
  rows = []
  for batch in dataset:
    outputs = model({k: batch[k] for k in PRETRAINING_INPUTS}, training=False)
    rows.append({k: float(v) for k, v in helpers.pretraining_metrics(outputs, batch).items()})
  weights = np.array([r["masked_lm_weight_sum"] for r in rows])
  return dict(
      masked_lm_accuracy=np.sum(weights * [r["masked_lm_accuracy"] for r in rows]) / weights.sum(),
      masked_lm_loss=np.sum(weights * [r["masked_lm_loss"] for r in rows]) / weights.sum(),
      next_sentence_accuracy=np.mean([r["next_sentence_accuracy"] for r in rows]),
      next_sentence_loss=np.mean([r["next_sentence_loss"] for r in rows]),
      loss=np.mean([r["loss"] for r in rows]))


@pytest.mark.slow
def test_eval_results_file_has_the_original_keys_format_and_values(data, full_run):
  # 10 eval steps of 8 over 64 records: the eval data repeats, as in the original.
  output_dir, result = full_run
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    lines = f.read().splitlines()
  keys = [line.split(" = ")[0] for line in lines]
  assert keys == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                  "next_sentence_accuracy", "next_sentence_loss"]
  for line in lines:
    assert re.fullmatch(r"[a-z_]+ = -?[0-9.e+-]+", line), line
  assert lines[0] == "global_step = 6"
  written = evaluation.read_eval_results(os.path.join(output_dir, "eval_results.txt"))
  expected = _reference_eval(result["model"], data, 8, 10)
  for key, value in expected.items():
    assert written[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


@pytest.mark.slow
def test_gradient_accumulation_matches_the_full_batch(data, full_run, tmp_path):
  # 2 micro-batches of 4 per update against the full run's batches of 8 (same records).
  full_dir, full = full_run
  two = pretraining.run_pretraining(tiny_config(), tiny_settings(
      data, str(tmp_path / "two"), gradient_accumulation_steps=2, export_every_checkpoint=True),
      exporter=saved_model.EXPORTER)
  assert two["global_step"] == 6
  # Exports at the checkpoints before the last (export_at_end is off here).
  assert sorted(os.listdir(tmp_path / "two" / "export" / "encoder")) == ["2", "4"]
  assert two["train_loss"] == pytest.approx(full["train_loss"], rel=1e-5)
  # Float sums in another order: agreement to ~1e-6 relative after 6 Adam steps.
  assert_same_weights(checkpoint_values(os.path.join(full_dir, "ckpt-6")),
                      checkpoint_values(str(tmp_path / "two" / "ckpt-6")), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_cpu_towers_match_the_full_batch_in_training_and_evaluation(data, full_run, tmp_path,
                                                                     monkeypatch):
  # Towers of 4 (training and the eval batches of 8), against the full run's batches of 8.
  full_dir, full = full_run
  parts = []
  tower_batches = loop.Trainer._tower_batches

  def recording(self, batch, training):
    result = tower_batches(self, batch, training)
    parts.append((training, [int(part["input_word_ids"].shape[0]) for part in result]))
    return result
  monkeypatch.setattr(loop.Trainer, "_tower_batches", recording)
  towers = pretraining.run_pretraining(tiny_config(), tiny_settings(
      data, str(tmp_path / "towers"), cpu_towers=2, do_eval=True, max_eval_steps=10))
  # Traced once for training and once for evaluation, each as two towers of 4.
  assert sorted(set((training, tuple(sizes)) for training, sizes in parts)) == [
      (False, (4, 4)), (True, (4, 4))]
  assert towers["global_step"] == 6
  assert towers["train_loss"] == pytest.approx(full["train_loss"], rel=1e-5)
  assert_same_weights(checkpoint_values(os.path.join(full_dir, "ckpt-6")),
                      checkpoint_values(str(tmp_path / "towers" / "ckpt-6")), rtol=1e-4,
                      atol=1e-5)
  for key in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "loss"):
    assert towers[key] == pytest.approx(full[key], rel=1e-4, abs=1e-5), key


def test_cpu_towers_need_batches_they_divide(data, tmp_path):
  with pytest.raises(TrainingError, match=r"--train_batch_size=8 must be a multiple of "
                     r"replicas \(1\) x --gradient_accumulation_steps \(1\) x --cpu_towers "
                     r"\(3\)"):
    tiny_settings(data, str(tmp_path), cpu_towers=3).check()
  with pytest.raises(TrainingError, match=r"--cpu_towers=2 needs training batches of a "
                     r"fixed number of rows: --packing=exact"):
    tiny_settings(data, str(tmp_path), cpu_towers=2, packing="exact").check()
  with pytest.raises(TrainingError, match="--cpu_towers must be positive, got 0"):
    tiny_settings(data, str(tmp_path), cpu_towers=0).check()
  tiny_settings(data, str(tmp_path), cpu_towers=2, packing="static").check()


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_mixed_precision_runs_keep_float32_weights(data, tmp_path, precision):
  result = pretraining.run_pretraining(tiny_config(), tiny_settings(
      data, str(tmp_path / precision), num_train_steps=2, mixed_precision=precision))
  assert result["global_step"] == 2
  assert np.isfinite(result["train_loss"]) and 3.0 < result["train_loss"] < 6.0
  values = optimizer_values(str(tmp_path / precision / "ckpt-2"))
  assert all(v.dtype == np.float32 for k, v in values.items() if "_trainable_variables" in k)
  names = tf.train.load_checkpoint(str(tmp_path / precision / "ckpt-2")).get_variable_to_shape_map()
  # float16 carries the dynamic loss scale in the checkpoint; bfloat16 needs none.
  assert any("dynamic_scale" in n for n in names) == (precision == "float16")


@pytest.mark.slow
def test_init_checkpoint_loads_original_tf1_weights(data, tmp_path, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  config = tiny_config()
  source = build_pretraining_model(config)
  prefix = checkpoints.save_tf1_checkpoint(source, str(tmp_path / "tf1" / "bert_model.ckpt"))
  expected = checkpoints.get_original_weights(source)
  # learning_rate 0: the step leaves the weights as loaded.
  pretraining.run_pretraining(config, tiny_settings(
      data, str(tmp_path / "run"), init_checkpoint=prefix, learning_rate=0.0,
      num_train_steps=1, save_checkpoints_steps=1))
  got = checkpoint_values(str(tmp_path / "run" / "ckpt-1"))
  for name, value in expected.items():
    np.testing.assert_allclose(got[name], value, rtol=0, atol=1e-7, err_msg=name)
  # Like the original, every trainable variable is logged and marked as restored.
  marked = [r.getMessage() for r in caplog.records if "*INIT_FROM_CKPT*" in r.getMessage()]
  assert len(marked) == len(source.trainable_variables) == len(expected)
  assert "name = layer_1/output_dense/kernel, shape = (37, 64), *INIT_FROM_CKPT*" in [
      m.strip() for m in marked]


@pytest.mark.slow
def test_init_checkpoint_from_our_training_checkpoint(full_run, tmp_path):
  """The two-phase recipe: phase 2 at twice phase 1's length, packed, from phase 1's run
  directory (--init_checkpoint): its weights, a fresh optimizer and schedule."""
  config = tiny_config()
  full_dir, _ = full_run  # phase 1: sequence 16
  trained = checkpoint_values(os.path.join(full_dir, "ckpt-6"))
  long_data = helpers.make_records(str(tmp_path / "long.tfrecord"), seq=2 * SEQ)
  phase2 = pretraining.run_pretraining(config, tiny_settings(
      long_data, str(tmp_path / "b"), init_checkpoint=full_dir, learning_rate=0.0,
      max_seq_length=2 * SEQ, packing="exact", do_eval=True,
      max_eval_steps=2, num_train_steps=1, save_checkpoints_steps=1, seed=99))
  loaded = checkpoint_values(str(tmp_path / "b" / "ckpt-1"))
  assert_same_weights(trained, loaded, rtol=0, atol=0)
  # Weights only: the new run starts at step 0 with fresh optimizer state (one update, where
  # phase 1's optimizer had made 6), and it evaluates on the long records.
  reader = tf.train.load_checkpoint(str(tmp_path / "b" / "ckpt-1"))
  assert int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")) == 1
  assert int(reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")) == 1
  assert phase2["global_step"] == 1 and np.isfinite(phase2["masked_lm_loss"])


def test_metadata_mismatch_and_empty_glob_are_clear_errors(data, tmp_path):
  config = tiny_config()
  with pytest.raises(TrainingError, match=r"--max_seq_length=32.*max_seq_length=16"):
    pretraining.run_pretraining(config, tiny_settings(data, str(tmp_path / "a"),
                                                   max_seq_length=32))
  with pytest.raises(TrainingError, match=r"--do_lower_case=False"):
    pretraining.run_pretraining(config, tiny_settings(data, str(tmp_path / "b"),
                                                   do_lower_case=False))
  with pytest.raises(TrainingError, match=r"vocab"):
    pretraining.run_pretraining(tiny_config(vocab_size=32), tiny_settings(data, str(tmp_path / "c")))
  with pytest.raises(TrainingError, match=r"--input_file.*no file matches"):
    pretraining.run_pretraining(config, tiny_settings(str(tmp_path / "none-*.tfrecord"),
                                                   str(tmp_path / "d")))
  with pytest.raises(TrainingError, match=r"--eval_input_file.*no file matches"):
    pretraining.run_pretraining(config, tiny_settings(data, str(tmp_path / "e"), do_eval=True,
                                                   eval_input_file=str(tmp_path / "x*")))
  with pytest.raises(TrainingError, match=r"--train_batch_size=6 must be a multiple"):
    pretraining.run_pretraining(config, tiny_settings(data, str(tmp_path / "f"),
                                                   train_batch_size=6,
                                                   gradient_accumulation_steps=4))
  with pytest.raises(TrainingError, match=r"at least one of --do_train or --do_eval"):
    pretraining.run_pretraining(config, tiny_settings(data, str(tmp_path / "h"), do_train=False))
  with pytest.raises(TrainingError, match=r"--dynamic_masking needs --vocab_file"):
    pretraining.run_pretraining(config, tiny_settings(data, str(tmp_path / "g"),
                                                   dynamic_masking=True))


@pytest.mark.slow
def test_non_finite_loss_stops_with_the_step_and_last_checkpoint(data, tmp_path):
  # An absurd learning rate blows the weights up within a few steps.
  with pytest.raises(TrainingError) as error:
    pretraining.run_pretraining(tiny_config(), tiny_settings(
        data, str(tmp_path / "run"), learning_rate=1e30, num_train_steps=20,
        save_checkpoints_steps=1, iterations_per_loop=1, num_warmup_steps=1))
  match = re.search(r"non-finite loss at step (\d+) .*last good checkpoint is (\S+)\.",
                    str(error.value))
  assert match, str(error.value)
  step, last_good = int(match.group(1)), match.group(2)
  assert 1 < step < 20
  # Nothing was saved after the bad step; the named checkpoint is the one before it.
  assert last_good == str(tmp_path / "run" / f"ckpt-{step - 1}")
  assert tf.train.latest_checkpoint(str(tmp_path / "run")) == last_good
  assert all(np.isfinite(v).all() for v in checkpoint_values(last_good).values())


@pytest.mark.slow
def test_dynamic_masking_with_lamb_trains(data, tmp_path):
  vocab = write_vocab(str(tmp_path / "vocab.txt"))
  result = pretraining.run_pretraining(tiny_config(), tiny_settings(
      data, str(tmp_path / "run"), dynamic_masking=True, vocab_file=vocab, num_train_steps=2,
      optimizer="lamb"))
  assert result["global_step"] == 2 and 3.0 < result["train_loss"] < 6.0


@pytest.mark.slow
def test_export_reloads_with_the_same_outputs(data, full_run):
  output_dir, result = full_run
  export_dir = result["export_dir"]
  base_dir = os.path.join(output_dir, "export")
  assert export_dir == os.path.join(base_dir, "encoder", "6")
  # One layout for every export: <output_dir>/export/<model>/<step>/, assets inside.
  assert sorted(os.listdir(base_dir)) == ["bert", "bert_encoder", "bert_preprocessor", "encoder",
                                          "pretraining"]
  assert all(os.listdir(os.path.join(base_dir, name)) == ["6"] for name in os.listdir(base_dir))
  for name in ("encoder", "pretraining"):
    assets = os.path.join(base_dir, name, "6", "assets")
    assert BertConfig.from_json_file(os.path.join(assets, "bert_config.json")) == tiny_config()
    with open(os.path.join(assets, "vocab.txt")) as f:
      assert f.read().split() == VOCAB_TOKENS
    with open(os.path.join(assets, "data_metadata.json")) as f:
      assert '"max_seq_length": 16' in f.read()
  model = result["model"]
  batch = next(iter(input_pipeline.pretraining_dataset(data, SEQ, PREDS, 4, is_training=False)))
  inputs = {k: batch[k] for k in PRETRAINING_INPUTS}
  expected = model(inputs, training=False)
  exported = tf.saved_model.load(os.path.join(base_dir, "pretraining", "6"))
  got = exported.signatures["serving_default"](**inputs)
  for key in ("masked_lm_logits", "next_sentence_logits"):
    np.testing.assert_allclose(got[key].numpy(), expected[key].numpy(), rtol=1e-5, atol=1e-5)
  encoder = tf.saved_model.load(export_dir)
  encoded = encoder.signatures["serving_default"](
      input_word_ids=inputs["input_word_ids"], input_mask=inputs["input_mask"],
      input_type_ids=inputs["input_type_ids"])
  assert encoded["sequence_output"].shape == (4, SEQ, 64)
  assert encoded["pooled_output"].shape == (4, 64)
  # The encoder export carries the same weights: its sequence output feeds the same head.
  reference = checkpoints.get_original_weights(model)
  np.testing.assert_allclose(
      encoded["pooled_output"].numpy(),
      np.tanh(encoded["sequence_output"].numpy()[:, 0] @ reference["bert/pooler/dense/kernel"]
              + reference["bert/pooler/dense/bias"]), rtol=1e-4, atol=1e-5)
  # 0 rows, and sequence length 0, give empty outputs (reliability probe item 17).
  assert helpers.assert_empty_requests_give_empty_results(encoder) == 2
  # With a vocab, the export also holds the TF Serving models (raw text in) at the same step,
  # consistent with the plain encoder export.
  words = [t for t in VOCAB_TOKENS if not t.startswith(("[", "##"))][:5]
  texts = tf.constant([" ".join(words), words[0]])
  packed = tf.saved_model.load(os.path.join(base_dir, "bert_preprocessor", "6")).signatures[
      "serving_default"](text=texts)
  # 5 words + [CLS] + [SEP] = 7 pieces: padded to the length bucket 8, not to SEQ (16).
  assert packed["input_word_ids"].shape == (2, 8)
  served = tf.saved_model.load(os.path.join(base_dir, "bert", "6")).signatures[
      "serving_default"](text=texts)
  np.testing.assert_allclose(served["pooled_output"].numpy(),
                             encoder.signatures["serving_default"](**packed)["pooled_output"],
                             rtol=1e-5, atol=1e-5)


def test_a_config_vocab_larger_than_the_datas_is_warned_about(data, tmp_path, caplog):
  """Ids beyond the config's vocab are refused (check_metadata); a config vocab larger than
  the data's trains, with a warning giving both sizes."""
  settings = tiny_settings(data, str(tmp_path / "run"))
  with caplog.at_level(logging.WARNING):
    pretraining._check_data(settings, tiny_config(), data, "input_file")  # pylint: disable=protected-access
  assert "vocab_size" not in caplog.text
  larger = tiny_config(vocab_size=helpers.VOCAB + 8)
  with caplog.at_level(logging.WARNING):
    pretraining._check_data(settings, larger, data, "input_file")  # pylint: disable=protected-access
  assert (f"The config's vocab_size is {helpers.VOCAB + 8} but the input_file data was made "
          f"with a vocabulary of {helpers.VOCAB} tokens: 8 rows") in caplog.text
  with pytest.raises(TrainingError, match="vocab_size"):
    pretraining._check_data(settings, tiny_config(vocab_size=helpers.VOCAB - 1), data,  # pylint: disable=protected-access
                            "input_file")
