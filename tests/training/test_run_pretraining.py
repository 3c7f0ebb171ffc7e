"""End-to-end tests of `python -m bert_tf.run_pretraining`: a full run, errors, kill -9 + resume.

Each test starts the real CLI in a subprocess (tiny model, tiny records from tests.helpers).
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import checkpoint_values, make_records, tiny_config, write_vocab
from tests import helpers

# Subprocesses and real training runs: the slow tier (CI runs them).
pytestmark = pytest.mark.slow

REPO_ROOT = helpers.REPO_ROOT


_env = helpers.subprocess_env


def _command(workdir, output_dir, *extra):
  return [sys.executable, "-m", "bert_tf.run_pretraining",
          f"--bert_config_file={workdir}/bert_config.json",
          f"--input_file={workdir}/train.tfrecord", f"--output_dir={output_dir}",
          "--max_seq_length=16", "--max_predictions_per_seq=3", "--train_batch_size=8",
          "--learning_rate=1e-3", "--num_warmup_steps=0", "--seed=7", "--deterministic_ops",
          *extra]


def _run(args, timeout=240):
  return subprocess.run(args, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True,
                        timeout=timeout)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  path = tmp_path_factory.mktemp("cli")
  make_records(str(path / "train.tfrecord"))
  tiny_config().to_json_file(str(path / "bert_config.json"))
  write_vocab(str(path / "vocab.txt"))
  return str(path)


# Steps, checkpoint interval. The kill lands as soon as the first checkpoint is seen (polled
# every 20 ms); the run must not be able to finish in that time on any machine, so it is long
# (200 tiny steps: a few seconds), where 40 steps once finished before the kill.
NUM_STEPS = 100
KILL_RUN = ("--do_train", f"--num_train_steps={NUM_STEPS}", "--save_checkpoints_steps=5",
            "--iterations_per_loop=1", "--keep_checkpoint_max=3")


def test_kill_9_then_restart_ends_like_an_uninterrupted_run(workdir, tmp_path):
  # The uninterrupted run, which also evaluates and exports (the CLI's whole path). It saves
  # only its last checkpoint (flags after KILL_RUN's win): when checkpoints are written changes
  # no weight, and the nineteen others cost about a quarter of its time.
  reference_dir = str(tmp_path / "reference")
  done = _run(_command(workdir, reference_dir, *KILL_RUN, f"--save_checkpoints_steps={NUM_STEPS}",
                       "--do_eval", "--max_eval_steps=3", f"--vocab_file={workdir}/vocab.txt",
                       "--noexport_serving"))
  assert done.returncode == 0, done.stderr[-3000:]
  assert "per-replica batch 8" in done.stderr
  assert "examples/s" in done.stderr and "ETA" in done.stderr
  assert helpers.noise_lines(done.stderr) == [], done.stderr[-3000:]  # quiet logs (logs.py)
  with open(os.path.join(reference_dir, "eval_results.txt")) as f:
    assert f.readline() == f"global_step = {NUM_STEPS}\n"
  export_dir = os.path.join(reference_dir, "export")
  assert sorted(os.listdir(export_dir)) == ["encoder", "pretraining"]  # --noexport_serving
  for name in ("encoder", "pretraining"):
    assert sorted(os.listdir(os.path.join(export_dir, name, str(NUM_STEPS), "assets"))) == [
        "bert_config.json", "data_metadata.json", "vocab.txt"]

  killed_dir = str(tmp_path / "killed")
  process = subprocess.Popen(_command(workdir, killed_dir, *KILL_RUN), cwd=REPO_ROOT,
                             env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + 180
    while time.time() < deadline and process.poll() is None:
      if tf.train.latest_checkpoint(killed_dir):
        break
      time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
  finally:
    if process.poll() is None:
      process.kill()
  assert process.returncode == -signal.SIGKILL
  latest = tf.train.latest_checkpoint(killed_dir)
  assert latest is not None
  killed_at = int(latest.rsplit("-", 1)[1])
  assert 5 <= killed_at < NUM_STEPS
  # The latest checkpoint is whole: it loads.
  checkpoint_values(latest)

  restarted = _run(_command(workdir, killed_dir, *KILL_RUN))
  assert restarted.returncode == 0, restarted.stderr[-3000:]
  assert f"Resuming from {latest}" in restarted.stderr
  final = tf.train.latest_checkpoint(killed_dir)
  assert final.endswith(f"ckpt-{NUM_STEPS}")
  expected = checkpoint_values(os.path.join(reference_dir, f"ckpt-{NUM_STEPS}"))
  got = checkpoint_values(final)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_metadata_mismatch_is_a_message_not_a_traceback(workdir, tmp_path):
  result = _run(_command(workdir, str(tmp_path / "out"), "--do_train",
                         "--max_predictions_per_seq=20"))
  assert result.returncode == 1
  assert "run_pretraining: error:" in result.stderr
  assert "--max_predictions_per_seq=20 but the data was made with max_predictions_per_seq=3" \
      in result.stderr
  # Once, as the one line "run_pretraining: error: ..." (not also as an absl ERROR log line).
  assert result.stderr.count("but the data was made with max_predictions_per_seq=3") == 1
  assert "Traceback" not in result.stderr
  assert not tf.io.gfile.glob(str(tmp_path / "out" / "ckpt-*"))
