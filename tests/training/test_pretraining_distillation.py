"""run_pretraining --teacher: DistilBERT's triple loss against a NumPy reference (unpacked and
packed rows), the guards on real teacher folders, and distilled runs that train, evaluate the
teacher first and resume to the weights of an uninterrupted run."""

import json
import os
import shutil

import numpy as np
import pytest

from bert_tf import row_packing
from bert_tf.model import checkpoints
from bert_tf.model import heads
from bert_tf.training import distillation
from bert_tf.training import evaluation
from bert_tf.training import input_pipeline
from bert_tf.training import packed_rows
from bert_tf.training import pretraining
from bert_tf.training.distillation import pretraining_teacher
from bert_tf.training.errors import TrainingError
from tests import helpers


@pytest.fixture(scope="module")
def teacher_run(data, tmp_path_factory):
  """A pretrained tiny teacher (3 layers): a run_pretraining folder with its vocab."""
  output_dir = str(tmp_path_factory.mktemp("teacher"))
  vocab = helpers.write_vocab(os.path.join(output_dir, "vocab.txt"))
  pretraining.run_pretraining(helpers.tiny_config(num_hidden_layers=3), helpers.tiny_settings(
      data, output_dir, num_train_steps=4, vocab_file=vocab))
  return output_dir


def _batch(data, packing=None):
  return next(iter(input_pipeline.pretraining_dataset(
      data, helpers.SEQ, helpers.PREDS, 16, is_training=False, packing=packing)))


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _reference_loss(student, teacher, batch, temperature, alpha, cosine_weight):
  """The distilled loss of one replica's whole batch, in NumPy."""
  w = batch["masked_lm_weights"].numpy().astype(np.float64)
  ids = batch["masked_lm_ids"].numpy()
  s = student["masked_lm_logits"].numpy().astype(np.float64)
  t = teacher["masked_lm_logits"].numpy().astype(np.float64)
  hard = -np.take_along_axis(_log_softmax(s), ids[..., None], -1)[..., 0]
  soft = -(np.exp(_log_softmax(t / temperature)) * _log_softmax(s / temperature)).sum(-1)
  soft *= temperature ** 2
  hs = student["masked_lm_hidden"].numpy().astype(np.float64)
  ht = teacher["masked_lm_hidden"].numpy().astype(np.float64)
  cosine = 1 - (hs * ht).sum(-1) / (np.linalg.norm(hs, axis=-1) * np.linalg.norm(ht, axis=-1))
  masked_lm = (w * (alpha * hard + (1 - alpha) * soft + cosine_weight * cosine)).sum()
  masked_lm /= w.sum() + 1e-5
  nsp_logits = student["next_sentence_logits"].numpy().astype(np.float64)
  labels = batch["next_sentence_labels"].numpy().reshape(-1)
  nll = -np.take_along_axis(_log_softmax(nsp_logits), labels[:, None], -1)[:, 0]
  if input_pipeline.NEXT_SENTENCE_WEIGHTS in batch:
    slots = batch[input_pipeline.NEXT_SENTENCE_WEIGHTS].numpy().reshape(-1)
    return masked_lm + (slots * nll).sum() / slots.sum()
  return masked_lm + nll.mean()


@pytest.mark.parametrize("packing", [None, row_packing.EXACT])
def test_distilled_loss_is_the_triple_loss_plus_next_sentence(data, packing):
  packed = packing is not None
  student = heads.build_pretraining_model(helpers.tiny_config(num_hidden_layers=1),
                                          prune_last_layer=True, packed=packed,
                                          masked_hidden=True)
  teacher = heads.build_pretraining_model(helpers.tiny_config(num_hidden_layers=3),
                                          name="teacher", prune_last_layer=True, packed=packed,
                                          masked_hidden=True)
  batch = _batch(data, packed_rows.Packing(packing) if packed else None)
  inputs = pretraining.model_inputs(batch)
  outputs, teacher_outputs = student(inputs), teacher(inputs)
  task = pretraining.distilled_task(lambda b: teacher_outputs, temperature=2.0, alpha=0.3,
                                    cosine_weight=0.7)
  loss, sums = task.replica_loss(outputs, batch, pretraining.normalizers(batch), 16)
  expected = _reference_loss(outputs, teacher_outputs, batch, 2.0, 0.3, 0.7)
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  # The metric sums are the task's own; alpha 1 without cosine is the task's loss.
  _, plain_sums = pretraining.TASK.replica_loss(outputs, batch, pretraining.normalizers(batch),
                                                16)
  assert {k: float(v) for k, v in sums.items()} == {k: float(v) for k, v in plain_sums.items()}
  hard_only = pretraining.distilled_task(lambda b: teacher_outputs, 2.0, 1.0, 0.0)
  plain, _ = pretraining.TASK.replica_loss(outputs, batch, pretraining.normalizers(batch), 16)
  got, _ = hard_only.replica_loss(outputs, batch, pretraining.normalizers(batch), 16)
  assert float(got) == pytest.approx(float(plain), rel=1e-6)


def test_masked_hidden_is_the_last_layer_at_the_masked_positions(data):
  config = helpers.tiny_config()
  full = heads.build_pretraining_model(config, masked_hidden=True)
  pruned = heads.build_pretraining_model(config, prune_last_layer=True, masked_hidden=True)
  checkpoints.set_original_weights(pruned, checkpoints.get_original_weights(full), "full")
  inputs = pretraining.model_inputs(_batch(data))
  a, b = full(inputs)["masked_lm_hidden"].numpy(), pruned(inputs)["masked_lm_hidden"].numpy()
  assert a.shape == (16, helpers.PREDS, config.hidden_size)
  np.testing.assert_allclose(a, b, atol=1e-5)
  assert "masked_lm_hidden" not in heads.build_pretraining_model(config).output


def _settings(data, output_dir, teacher, **changes):
  return helpers.tiny_settings(data, output_dir, teacher=teacher, **changes)


def test_teachers_that_cannot_teach_are_refused_before_anything_is_written(
    data, teacher_run, tmp_path):
  student = helpers.tiny_config(num_hidden_layers=1)
  out = str(tmp_path / "out")
  cases = []
  # Another vocab recorded beside the teacher.
  other = str(tmp_path / "other_vocab")
  shutil.copytree(teacher_run, other)
  with open(os.path.join(other, "vocab.txt"), "a") as f:
    f.write("extra\n")
  metadata = os.path.join(other, "data_metadata.json")
  with open(metadata) as f:
    recorded = json.load(f)
  recorded["vocab_md5"] = "0" * 32
  with open(metadata, "w") as f:
    json.dump(recorded, f)
  cases.append((other, {}, r"vocab has md5 0{32} but the student's"))
  # Another vocabulary size, another width with an explicit cosine weight.
  cases.append((teacher_run, dict(config=helpers.tiny_config(vocab_size=80)),
                r"predicts 64 tokens but the student's config 80"))
  cases.append((teacher_run, dict(config=helpers.tiny_config(hidden_size=32),
                                  distill_cosine_weight=1.0),
                r"--distill_cosine_weight=1.0 compares hidden states.*32.*use "
                r"--distill_cosine_weight=0"))
  for teacher, changes, message in cases:
    config = changes.pop("config", student)
    with pytest.raises(TrainingError, match=message):
      pretraining.run_pretraining(config, _settings(data, out, teacher, **changes))
    assert not os.path.exists(out)


def test_a_teacher_without_the_masked_lm_head_is_refused(data, teacher_run, tmp_path):
  encoder_only = str(tmp_path / "encoder")
  os.makedirs(encoder_only)
  model = heads.build_pretraining_model(helpers.tiny_config(num_hidden_layers=3))
  checkpoints.load_weights(model, teacher_run)
  weights = {k: v for k, v in checkpoints.get_original_weights(model).items()
             if not k.startswith("cls/")}
  checkpoints.write_tf1_checkpoint(weights, os.path.join(encoder_only, "bert_model.ckpt"))
  shutil.copy(os.path.join(teacher_run, "bert_config.json"), encoder_only)
  with pytest.raises(TrainingError, match=r"lacks \d+ weight\(s\) of a pretraining model .*"
                                          r"masked-LM and next-sentence heads"):
    pretraining.run_pretraining(helpers.tiny_config(num_hidden_layers=1),
                                _settings(data, str(tmp_path / "out"),
                                          os.path.join(encoder_only, "bert_model.ckpt")))
  assert not os.path.exists(tmp_path / "out")


def test_distillation_flags_are_checked(data, teacher_run, tmp_path):
  settings = _settings(data, str(tmp_path), teacher_run, distill_alpha=1.5,
                       distill_temperature=0.0, distill_cosine_weight=-1.0, do_train=False,
                       do_eval=True, init_layers="7,x")
  with pytest.raises(TrainingError) as raised:
    settings.check()
  for part in ("--distill_alpha must be in [0, 1]", "--distill_temperature must be positive",
               "--distill_cosine_weight must be >= 0", "teaches a run that trains",
               "--init_layers=7,x"):
    assert part in str(raised.value)
  # Without --teacher a distillation weight would go unused: refused, not ignored.
  settings = _settings(data, str(tmp_path), None, distill_alpha=0.3,
                       distill_cosine_weight=0.5)
  with pytest.raises(TrainingError) as raised:
    settings.check()
  for part in ("--distill_alpha=0.3 weighs what a teacher teaches: add --teacher",
               "--distill_cosine_weight=0.5 weighs what a teacher teaches: add --teacher"):
    assert part in str(raised.value)


@pytest.mark.slow
def test_a_distilled_run_trains_evaluates_its_teacher_first_and_resumes(data, teacher_run,
                                                                        tmp_path):
  config = helpers.tiny_config(num_hidden_layers=1)
  whole = str(tmp_path / "whole")
  result = pretraining.run_pretraining(config, _settings(
      data, whole, teacher_run, init_checkpoint=teacher_run, do_eval=True, num_train_steps=6))
  results = evaluation.read_eval_results(os.path.join(whole, "eval_results.txt"))
  for key in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "loss"):
    assert f"teacher_{key}" in results and key in results
    assert result[f"teacher_{key}"] == pytest.approx(results[f"teacher_{key}"])
  # The teacher's results are its own: an evaluation of the teacher folder alone.
  alone = pretraining.run_pretraining(helpers.tiny_config(num_hidden_layers=3), _settings(
      data, str(tmp_path / "alone"), None, init_checkpoint=teacher_run, do_train=False,
      do_eval=True))
  assert results["teacher_masked_lm_loss"] == pytest.approx(alone["masked_lm_loss"], rel=1e-5)
  # Interrupted at step 4 (only its checkpoint survived) and resumed: the teacher is loaded
  # again, and the weights are the uninterrupted run's.
  split = tmp_path / "split"
  split.mkdir()
  for name in os.listdir(whole):
    if name.startswith("ckpt-4."):
      shutil.copy(os.path.join(whole, name), split / name)
  (split / "checkpoint").write_text(
      'model_checkpoint_path: "ckpt-4"\nall_model_checkpoint_paths: "ckpt-4"\n')
  resumed = pretraining.run_pretraining(config, _settings(
      data, str(split), teacher_run, init_checkpoint=teacher_run, num_train_steps=6))
  assert resumed["global_step"] == 6
  helpers.assert_same_weights(helpers.checkpoint_values(os.path.join(whole, "ckpt-6"), config),
                              helpers.checkpoint_values(str(split / "ckpt-6"), config))
  # A distilled student differs from the same student trained without the teacher.
  plain = pretraining.run_pretraining(config, helpers.tiny_settings(
      data, str(tmp_path / "plain"), init_checkpoint=teacher_run, num_train_steps=6))
  a = checkpoints.get_original_weights(plain["model"])
  b = checkpoints.get_original_weights(result["model"])
  assert max(float(np.abs(a[k] - b[k]).max()) for k in a) > 1e-4


def test_defaults_and_cosine_weight_rule():
  settings = pretraining.PretrainingSettings(input_file="x", output_dir="y")
  assert (settings.distill_alpha, settings.distill_temperature) == (
      distillation.DEFAULT_ALPHA, distillation.DEFAULT_TEMPERATURE)
  wide, narrow = helpers.tiny_config(), helpers.tiny_config(hidden_size=32)
  assert pretraining_teacher.cosine_weight(settings, wide, wide) == 1.0
  assert pretraining_teacher.cosine_weight(settings, wide, narrow) == 0.0
  explicit = pretraining.PretrainingSettings(input_file="x", output_dir="y",
                                             distill_cosine_weight=0.25)
  assert pretraining_teacher.cosine_weight(explicit, wide, wide) == 0.25
