"""Resume finds the newest valid checkpoint and never silently starts again from step 0.

Reliability probe item 7: when the `checkpoint` state file named a checkpoint whose files were
gone, training restarted from step 0 (and saved over the older checkpoints); a truncated newest
checkpoint stopped the run with an unlabelled IndexError.
"""

import json
import logging
import os
import shutil

import pytest
import tensorflow as tf

from bert_tf.training import pretraining
from bert_tf.training import run_folder
from bert_tf.training.errors import TrainingError

from tests.helpers import (assert_same_weights, checkpoint_values, tiny_config,
                           tiny_settings, write_lock)

# Every test here trains (the shared 6-step run or its own): the slow tier.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def full_run(data, tmp_path_factory):
  """6 steps, a checkpoint every 2: ckpt-2, ckpt-4, ckpt-6."""
  out = str(tmp_path_factory.mktemp("full"))
  result = pretraining.run_pretraining(tiny_config(), tiny_settings(data, out))
  assert result["global_step"] == 6
  return out


def _copy(full_run, tmp_path):
  target = tmp_path / "run"
  shutil.copytree(full_run, target)
  return target


def _resume(data, run_dir, caplog):
  caplog.clear()
  with caplog.at_level(logging.INFO):
    return pretraining.run_pretraining(tiny_config(), tiny_settings(data, str(run_dir)))


def _remove(run_dir, prefix):
  for name in os.listdir(run_dir):
    if name.startswith(prefix + "."):
      os.remove(run_dir / name)


def _delete_newest(run_dir):
  _remove(run_dir, "ckpt-6")  # the state file still names it
  return f"{run_dir / 'ckpt-6'} is listed but its files are missing"


def _truncate_newest(run_dir):
  data_file = run_dir / "ckpt-6.data-00000-of-00001"
  data_file.write_bytes(data_file.read_bytes()[:1000])
  return f"Checkpoint {run_dir / 'ckpt-6'} cannot be restored"


@pytest.mark.parametrize("damage", [_delete_newest, _truncate_newest])
def test_a_missing_or_damaged_newest_checkpoint_falls_back_to_the_previous_one(
    data, full_run, tmp_path, caplog, damage):
  run_dir = _copy(full_run, tmp_path)
  warning = damage(run_dir)
  result = _resume(data, run_dir, caplog)
  assert warning in caplog.text
  assert f"Resuming from {run_dir / 'ckpt-4'}" in caplog.text
  # Two more steps from step 4 give the uninterrupted run's weights.
  assert result["global_step"] == 6
  assert_same_weights(checkpoint_values(os.path.join(full_run, "ckpt-6")),
                      checkpoint_values(str(run_dir / "ckpt-6")))


@pytest.mark.parametrize("damage", [_delete_newest, _truncate_newest])
def test_a_run_that_does_not_train_refuses_a_damaged_newest_checkpoint(
    data, full_run, tmp_path, caplog, damage):
  """Fine-tuning probe K9: evaluating (or predicting) must not fall back to an older
  checkpoint than the newest without being told: its results would describe another model."""
  run_dir = _copy(full_run, tmp_path)
  damage(run_dir)
  before = {name: (run_dir / name).read_bytes() for name in os.listdir(run_dir)}
  with pytest.raises(TrainingError, match=r"newest checkpoint in .* cannot be restored "
                                               r"\(.*ckpt-6: .*older one \(.*ckpt-4\)"):
    pretraining.run_pretraining(tiny_config(), tiny_settings(
        data, str(run_dir), do_train=False, do_eval=True))
  assert {name: (run_dir / name).read_bytes() for name in os.listdir(run_dir)} == before


def test_checkpoints_are_found_without_the_state_file(data, full_run, tmp_path, caplog):
  run_dir = _copy(full_run, tmp_path)
  os.remove(run_dir / "checkpoint")
  assert run_folder.run_checkpoints(str(run_dir)) == [str(run_dir / f"ckpt-{n}") for n in (6, 4, 2)]
  result = _resume(data, run_dir, caplog)
  assert f"Resuming from {run_dir / 'ckpt-6'}" in caplog.text
  assert result["global_step"] == 6


def test_no_restorable_checkpoint_is_an_error_that_touches_nothing(data, full_run, tmp_path,
                                                                  caplog):
  run_dir = _copy(full_run, tmp_path)
  for step in (2, 4, 6):
    path = run_dir / f"ckpt-{step}.data-00000-of-00001"
    path.write_bytes(path.read_bytes()[:100])
  before = {name: (run_dir / name).read_bytes() for name in os.listdir(run_dir)
            if name.startswith("ckpt-")}
  with pytest.raises(TrainingError, match="holds checkpoints but none can be restored "
                                               r"\(.*ckpt-6: .*ckpt-2: .*refusing to start again"):
    _resume(data, run_dir, caplog)
  assert {name: (run_dir / name).read_bytes() for name in os.listdir(run_dir)
          if name.startswith("ckpt-")} == before
  assert tf.train.latest_checkpoint(str(run_dir)).endswith("ckpt-6")


def test_a_resume_with_another_config_is_refused_and_damages_nothing(data, full_run, tmp_path,
                                                                    caplog):
  run_dir = _copy(full_run, tmp_path)
  before = {name: (run_dir / name).read_bytes() for name in os.listdir(run_dir)
            if not os.path.isdir(run_dir / name)}
  wider = tiny_config(hidden_size=32, intermediate_size=40)
  for do_train in (True, False):
    with pytest.raises(TrainingError, match=r"--bert_config_file differs from .*"
                                                 r"bert_config.json.*hidden_size 64 -> 32"):
      pretraining.run_pretraining(wider, tiny_settings(data, str(run_dir), do_train=do_train,
                                                       do_eval=not do_train))
  assert {name: (run_dir / name).read_bytes() for name in os.listdir(run_dir)
          if not os.path.isdir(run_dir / name)} == before
  # The directory still works: the export tools read the recorded config beside the weights.
  assert checkpoint_values(str(run_dir / "ckpt-6"))


def test_a_resume_that_moves_the_data_position_is_refused(data, full_run, tmp_path, caplog):
  run_dir = _copy(full_run, tmp_path)
  with pytest.raises(TrainingError, match=r"--train_batch_size=16 but the checkpoints in "
                                               r".* were trained with --train_batch_size=8"):
    pretraining.run_pretraining(tiny_config(), tiny_settings(data, str(run_dir),
                                                             train_batch_size=16,
                                                             num_train_steps=8))
  # Evaluating the checkpoints with another batch size is fine, and keeps the record.
  result = pretraining.run_pretraining(tiny_config(), tiny_settings(
      data, str(run_dir), do_train=False, do_eval=True, eval_batch_size=4, train_batch_size=16))
  assert result["global_step"] == 6
  assert '"train_batch_size": 8' in (run_dir / run_folder.RUN_SETTINGS_FILE).read_text()


def test_a_run_directory_in_use_is_refused_at_once(data, full_run, tmp_path):
  from bert_tf import io  # pylint: disable=g-import-not-at-top
  run_dir = _copy(full_run, tmp_path)
  write_lock(str(run_dir), 1)  # a live process of this host holds it
  before = sorted(os.listdir(run_dir))
  with pytest.raises(io.DirectoryInUseError, match="is in use by run_pretraining"):
    pretraining.run_pretraining(tiny_config(), tiny_settings(data, str(run_dir),
                                                             num_train_steps=8))
  assert sorted(os.listdir(run_dir)) == before
  # Once the holder is gone (here: its lock removed), the run resumes and releases the lock.
  os.remove(run_dir / io.LOCK_NAME)
  assert pretraining.run_pretraining(tiny_config(), tiny_settings(
      data, str(run_dir), num_train_steps=8))["global_step"] == 8
  assert not os.path.exists(run_dir / io.LOCK_NAME)


def _dropout_run(data, run_dir, steps):
  config = tiny_config(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  return pretraining.run_pretraining(config, tiny_settings(data, str(run_dir),
                                                           num_train_steps=steps))


def test_resume_with_dropout_draws_the_masks_of_an_uninterrupted_run(data, tmp_path):
  """The dropout RNG states are in the checkpoint (guarantee 5): a run resumed from step 2
  ends with the weights of a 4-step run, masks included (without them it redraws step 1's)."""
  full = tmp_path / "full"
  assert _dropout_run(data, full, 4)["global_step"] == 4
  names = [name for name, _ in tf.train.list_variables(str(full / "ckpt-2"))]
  assert sum(name.startswith("dropout_seeds/") for name in names) == 7  # 1 + 3 per layer
  resumed = tmp_path / "resumed"
  resumed.mkdir()
  for name in os.listdir(full):
    if name.startswith("ckpt-2.") or name in ("bert_config.json", run_folder.RUN_SETTINGS_FILE):
      shutil.copy(full / name, resumed / name)
  (resumed / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
  assert _dropout_run(data, resumed, 4)["global_step"] == 4
  assert_same_weights(checkpoint_values(str(full / "ckpt-4")),
                      checkpoint_values(str(resumed / "ckpt-4")))


def test_checkpoints_without_dropout_seeds_still_resume(data, tmp_path, monkeypatch, caplog):
  """Checkpoints written before the seeds were saved resume, saying the masks will differ."""
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  with monkeypatch.context() as patch:
    patch.setattr(checkpoints, "dropout_seed_states", lambda model: None)
    _dropout_run(data, tmp_path, 2)
  assert not any(name.startswith("dropout_seeds/")
                 for name, _ in tf.train.list_variables(str(tmp_path / "ckpt-2")))
  with caplog.at_level(logging.WARNING):
    assert _dropout_run(data, tmp_path, 4)["global_step"] == 4
  assert "ckpt-2 holds no dropout RNG state" in caplog.text
  assert any(name.startswith("dropout_seeds/")
             for name, _ in tf.train.list_variables(str(tmp_path / "ckpt-4")))


def test_a_resume_with_other_training_flags_says_so(data, full_run, tmp_path, caplog):
  """Reliability probe item 14: --seed, --learning_rate or --input_file changed silently."""
  run_dir = _copy(full_run, tmp_path)
  other_data = str(tmp_path / "copy.tfrecord")
  shutil.copy(data, other_data)
  shutil.copy(data + ".metadata.json", other_data + ".metadata.json")
  with caplog.at_level(logging.WARNING):
    result = pretraining.run_pretraining(tiny_config(), tiny_settings(
        other_data, str(run_dir), num_train_steps=8, seed=8, learning_rate=2e-3))
  assert result["global_step"] == 8
  assert (f"--seed 7 -> 8; --learning_rate 0.001 -> 0.002; --num_train_steps 6 -> 8; "
          f"--input_file {data!r} -> {other_data!r}") in caplog.text
  assert "will not equal an uninterrupted run" in caplog.text
  # The record keeps what the flags were before the resume, as well as what they are now.
  with open(run_dir / "run_settings.json", encoding="utf-8") as f:
    recorded = json.load(f)
  assert recorded["seed"] == 8 and recorded["learning_rate"] == 2e-3
  assert recorded["changed_on_resume"] == [dict(
      seed=[7, 8], learning_rate=[1e-3, 2e-3], num_train_steps=[6, 8],
      input_file=[data, other_data])]


def test_recorded_flags_are_the_declared_flags_by_name(tmp_path):
  """run_settings.json holds exactly the POSITION_FLAGS and TRAJECTORY_FLAGS a command's
  settings declare (the attribute lookups it replaced, as a reference), for pretraining and
  for a fine-tuning task whose settings lack some of them (SQuAD: no data_dir, no input_file)."""
  from bert_tf.tasks.squad import run as squad_run  # pylint: disable=g-import-not-at-top
  from tests import helpers  # pylint: disable=g-import-not-at-top
  vocab = helpers.write_vocab(str(tmp_path / "vocab.txt"))
  for settings in (helpers.tiny_settings(str(tmp_path / "data"), str(tmp_path / "run"),
                                         do_train=True, packing="static"),
                   squad_run.SquadSettings(output_dir=str(tmp_path / "squad"), vocab_file=vocab,
                                           do_train=True, train_file="train.json", seed=3)):
    names = run_folder.POSITION_FLAGS + run_folder.TRAJECTORY_FLAGS
    reference = {key: getattr(settings, key) for key in names if hasattr(settings, key)}
    assert run_folder.recorded_flags(settings) == reference
    assert "train_batch_size" in reference and "packing" in reference
  assert "data_dir" not in run_folder.recorded_flags(settings)
  assert run_folder.recorded_flags(settings)["train_file"] == "train.json"
