"""The training loop under MirroredStrategy (2 logical CPUs) and MultiWorkerMirroredStrategy.

Logical devices must be configured before TensorFlow initialises, and multi-worker training
needs one process per worker, so the runs happen in subprocesses: the one-device and two-replica
runs in one that executes this file as a script (`python tests/training/test_distributed.py
OUTPUT_DIR`), the two workers through the command line; the tests compare what they save.

The training data is read without a shuffle buffer, so the global batch of every step holds the
same records on one device, on two replicas (sharded by record: even and odd records) and on two
workers; the loss of a global batch does not depend on the order of its examples, so all runs
must agree up to float rounding.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from tests import helpers

# Subprocesses and real training runs: the slow tier (CI runs them).
pytestmark = pytest.mark.slow

REPO_ROOT = helpers.REPO_ROOT
# Several float sums run in another order (per replica, then all-reduced); after 4 Adam steps
# the weights agree to ~1e-6 here. Adam's m / sqrt(v) amplifies differences in tiny gradients,
# hence the absolute tolerance.
RTOL, ATOL = 1e-4, 1e-5


# The run every test here makes: 4 steps of the tiny model, a checkpoint at 2 and 4. The
# two-worker runs go through the command line with these flags (the same values as _settings).
STEPS = 4
_CLI_FLAGS = ("--max_seq_length=16", "--max_predictions_per_seq=3", "--train_batch_size=8",
              "--learning_rate=1e-3", "--num_warmup_steps=0", "--seed=7", "--do_train",
              f"--num_train_steps={STEPS}", "--save_checkpoints_steps=2", "--noexport_at_end")


def _settings(data, output_dir, **changes):
  from tests.helpers import tiny_settings  # pylint: disable=g-import-not-at-top
  values = dict(num_train_steps=STEPS, save_checkpoints_steps=2, iterations_per_loop=2,
                shuffle_buffer_size=1, seed=7, learning_rate=1e-3, num_warmup_steps=0)
  values.update(changes)
  return tiny_settings(data, output_dir, **values)


def _save(result, path):
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  values = checkpoints.get_original_weights(result.pop("model"))
  np.savez(path, **{name.replace("/", "|"): value for name, value in values.items()})
  with open(path + ".json", "w") as f:
    json.dump({k: v for k, v in result.items() if isinstance(v, (int, float))}, f)


def _script(output_dir):
  """Runs in a subprocess (logical devices are set before TensorFlow starts): the same run on
  one device and on two replicas, on records written here."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.INFO)
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  sys.path.insert(0, REPO_ROOT)
  from bert_tf.training import distribution  # pylint: disable=g-import-not-at-top
  from bert_tf.training import pretraining  # pylint: disable=g-import-not-at-top
  from tests.helpers import make_records, tiny_config  # pylint: disable=g-import-not-at-top
  data = os.path.join(output_dir, "train.tfrecord")
  make_records(data)
  tiny_config().to_json_file(os.path.join(output_dir, "bert_config.json"))
  one = pretraining.run_pretraining(
      tiny_config(), _settings(data, os.path.join(output_dir, "one"), do_eval=True,
                               max_eval_steps=2),
      strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
  strategy = distribution.select_strategy("mirrored")
  assert strategy.num_replicas_in_sync == 2, strategy.extended.worker_devices
  two = pretraining.run_pretraining(
      tiny_config(), _settings(data, os.path.join(output_dir, "two"), do_eval=True,
                               max_eval_steps=2), strategy=strategy)
  _save(one, os.path.join(output_dir, "one.npz"))
  _save(two, os.path.join(output_dir, "two.npz"))


_env = helpers.subprocess_env


def _load(path):
  with np.load(path) as values:
    weights = {name.replace("|", "/"): values[name] for name in values.files}
  with open(path + ".json") as f:
    return weights, json.load(f)


def _assert_close(a, b):
  assert sorted(a) == sorted(b) and len(a) > 10
  for name in a:
    np.testing.assert_allclose(a[name], b[name], rtol=RTOL, atol=ATOL, err_msg=name)


def _free_ports(count):
  """Ports that were free a moment ago (the kernel picks them; the sockets are closed again).

  Another process may take one before a worker binds it (TF's gRPC server binds the wildcard
  address and cannot share a held port): the caller retries with new ports when a worker
  reports "Address already in use".
  """
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
  """The training records, and the weights and metrics of the same run on one device and on two
  replicas (MirroredStrategy), made once for the tests below."""
  root = tmp_path_factory.mktemp("distributed")
  done = subprocess.run([sys.executable, __file__, str(root)], cwd=REPO_ROOT,
                        env=_env(), capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-4000:]
  assert "2 replica(s), per-replica batch 4" in done.stderr
  return root


def test_mirrored_matches_one_device(one_device):
  one, one_metrics = _load(str(one_device / "one.npz"))
  two, two_metrics = _load(str(one_device / "two.npz"))
  assert one_metrics["global_step"] == two_metrics["global_step"] == STEPS
  for key in ("train_loss", "loss", "masked_lm_loss", "next_sentence_loss",
              "masked_lm_accuracy", "next_sentence_accuracy"):
    assert abs(one_metrics[key] - two_metrics[key]) <= 1e-5 * max(1, abs(one_metrics[key])), key
  _assert_close(one, two)


# === A cluster that does not start (issue 28, point 9) ===


def _classifier_command(tmp_path):
  """run_classifier, which chooses its strategy from TF_CONFIG before reading any data."""
  from tests.helpers import tiny_config  # pylint: disable=g-import-not-at-top
  config = str(tmp_path / "bert_config.json")
  tiny_config().to_json_file(config)
  return [sys.executable, "-m", "bert_tf.run_classifier", "--task_name=generic",
          "--text_a_column=text", "--label_column=label", f"--data_dir={tmp_path}",
          f"--output_dir={tmp_path / 'out'}", f"--bert_config_file={config}",
          f"--vocab_file={helpers.TEST_DATA}/vocab_uncased.txt", "--do_train",
          "--max_seq_length=32"]  # flags that pass the checks made before the cluster forms


def test_a_task_that_never_appears_ends_the_run_naming_it(tmp_path):
  """Worker 0 waits for the chief, which never starts, and for worker 1, which is there (a
  listening socket here): after the timeout the run ends naming the chief only."""
  chief, worker0, worker1 = _free_ports(3)
  present = socket.create_server(("127.0.0.1", worker1))
  try:
    tf_config = json.dumps({"cluster": {"chief": [f"127.0.0.1:{chief}"],
                                        "worker": [f"127.0.0.1:{worker0}",
                                                   f"127.0.0.1:{worker1}"]},
                            "task": {"type": "worker", "index": 0}})
    done = subprocess.run(_classifier_command(tmp_path), cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=240,
                          env=_env(TF_CONFIG=tf_config, BERT_TF_WORKER_START_TIMEOUT="3"))
  finally:
    present.close()
  assert done.returncode == 1, done.stderr[-3000:]
  assert done.stderr.splitlines()[-1] == (
      f"run_classifier: error: the multi-worker cluster did not start within 3 s: no answer "
      f"from /job:chief/task:0 (127.0.0.1:{chief}) (not started, or a wrong address in "
      "TF_CONFIG); start every task of TF_CONFIG, or set BERT_TF_WORKER_START_TIMEOUT to wait "
      "longer")
  assert not os.path.exists(tmp_path / "out")


def test_sigterm_stops_a_run_waiting_for_its_cluster(tmp_path):
  ports = _free_ports(2)
  tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                          "task": {"type": "worker", "index": 1}})
  run = subprocess.Popen(_classifier_command(tmp_path), cwd=REPO_ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True,
                         env=_env(TF_CONFIG=tf_config, BERT_TF_WORKER_START_TIMEOUT="600"))
  try:
    lines = []
    for line in run.stdout:
      lines.append(line)
      if "Waiting up to 600 s for the other 1 task(s)" in line:
        break
    assert run.poll() is None, "".join(lines)[-3000:]
    run.send_signal(signal.SIGTERM)
    output = "".join(lines) + run.communicate(timeout=60)[0]
  finally:
    if run.poll() is None:
      run.kill()
  assert run.returncode == 1, output[-3000:]
  assert output.splitlines()[-1] == (
      "run_classifier: error: stopped by SIGTERM while waiting for the multi-worker cluster to "
      f"start: no answer yet from /job:worker/task:0 (127.0.0.1:{ports[0]})")


# Each command with flags that ask for nothing, as a worker of a two-worker TF_CONFIG whose
# other worker never starts (issue 38, point 4).
_NOTHING_TO_DO = {
    "run_pretraining": (["--input_file=x.tfrecord", "--output_dir=out"],
                        "at least one of --do_train or --do_eval must be True"),
    "run_classifier": (["--task_name=mrpc", "--data_dir=.", "--output_dir=out"],
                       "At least one of `do_train`, `do_eval` or `do_predict' must be True."),
    "run_ner": (["--data_dir=.", "--output_dir=out"],
                "At least one of --do_train, --do_eval or --do_predict must be True."),
    "run_squad": (["--output_dir=out"], "At least one of `do_train` or `do_predict` must be True."),
}


@pytest.mark.parametrize("command", sorted(_NOTHING_TO_DO))
def test_a_flag_error_ends_a_worker_at_once_not_after_the_cluster_wait(tmp_path, command):
  from tests.helpers import tiny_config  # pylint: disable=g-import-not-at-top
  config = str(tmp_path / "bert_config.json")
  tiny_config(max_position_embeddings=512).to_json_file(config)  # the default lengths fit
  flags, message = _NOTHING_TO_DO[command]
  ports = _free_ports(2)  # nobody listens there
  tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                          "task": {"type": "worker", "index": 0}})
  start = time.time()
  done = subprocess.run(
      [sys.executable, "-m", f"bert_tf.{command}", f"--bert_config_file={config}",
       f"--vocab_file={helpers.TEST_DATA}/vocab_uncased.txt", *flags], cwd=tmp_path,
      capture_output=True, text=True, timeout=120,
      env=_env(TF_CONFIG=tf_config, BERT_TF_WORKER_START_TIMEOUT="600"))
  elapsed = time.time() - start
  assert done.returncode == 2, done.stderr[-3000:]
  assert done.stderr.splitlines()[-1] == f"{command}: usage error: {message} (see --help)"
  assert "Waiting up to" not in done.stderr
  assert elapsed < 120  # the time to import TensorFlow, not the 600 s of the cluster wait
  assert not os.path.exists(tmp_path / "out")


# === Two workers: the one-device result, and a clean finish is quiet (issue 38, point 3) ===

# run_pretraining, with one worker still busy for BERT_TF_TEST_LINGER seconds after the run (as a
# chief exporting a large model is): the others must neither complain nor leave before it. The
# training data is read in file order (no shuffle buffer, which has no flag), so that each global
# batch holds the records of the one-device run's.
_LINGERING_RUN_PRETRAINING = """
import dataclasses, os, sys, time
sys.path.insert(0, os.getcwd())
from bert_tf import cli, run_pretraining
from bert_tf.training import pretraining

run = pretraining.run_pretraining
pretraining.run_pretraining = lambda config, settings, *args, **kwargs: run(
    config, dataclasses.replace(settings, shuffle_buffer_size=1), *args, **kwargs)

def main(argv):
  run_pretraining.main(argv)
  time.sleep(float(os.environ.get("BERT_TF_TEST_LINGER", "0")))

cli.run(main, run_pretraining.define_flags, "run_pretraining")
"""


@pytest.mark.parametrize("lingering", [0, 1])
def test_two_workers_end_like_one_device_and_print_no_error(one_device, tmp_path, lingering):
  ports = _free_ports(2)
  cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
  workers, logs = [], []
  try:
    for index in range(2):
      tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
      logs.append(tmp_path / f"worker{index}.log")
      with open(logs[-1], "w") as log:
        workers.append(subprocess.Popen(
            [sys.executable, "-c", _LINGERING_RUN_PRETRAINING,
             f"--bert_config_file={one_device}/bert_config.json",
             f"--input_file={one_device}/train.tfrecord", f"--output_dir={tmp_path}/out",
             *_CLI_FLAGS, "--do_eval", "--max_eval_steps=2", "--eval_batch_size=8"],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
            env=_env(TF_CONFIG=tf_config,
                     # Longer than the 10 s heartbeat timeout, after which a leader that
                     # outlived a silent task would print an error.
                     BERT_TF_TEST_LINGER="13" if index == lingering else "0")))
    ended = [None, None]
    deadline = time.time() + 300
    while None in ended and time.time() < deadline:
      for index, worker in enumerate(workers):
        if ended[index] is None and worker.poll() is not None:
          ended[index] = time.time()
      time.sleep(0.05)
    codes = [worker.poll() for worker in workers]
  finally:
    for worker in workers:
      if worker.poll() is None:
        worker.kill()
  outputs = [log.read_text() for log in logs]
  assert codes == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
  for output in outputs:
    assert f"Finished at step {STEPS}" in output
    # Every error-level line: absl's (Python and C++) and TensorFlow's C++ ones.
    errors = [line for line in output.splitlines()
              if re.match(r"(E\d{4} |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [EF] )", line)
              or "Traceback" in line or ": error:" in line]
    assert errors == [], output[-3000:]
  # They left together, the leader (worker 0, TensorFlow's coordination service) last, both
  # without TensorFlow's teardown (7 s for the leader on a quiet machine).
  assert 0 <= ended[0] - ended[1] < 5, ended
  # Two workers, one replica each, each reading its half of the records (sharded by record),
  # end with the one-device weights; only the chief (worker 0) keeps checkpoints, worker 1's
  # scratch copy is gone.
  one, one_metrics = _load(str(one_device / "one.npz"))
  _assert_close(one, helpers.checkpoint_values(str(tmp_path / "out" / f"ckpt-{STEPS}")))
  assert not os.path.exists(tmp_path / "out" / ".worker_1_tmp")
  # Their evaluation scores the one device's batches (each worker its slice of every global
  # batch), so the results are the one device's.
  from bert_tf.training import evaluation  # pylint: disable=g-import-not-at-top
  results = evaluation.read_eval_results(str(tmp_path / "out" / "eval_results.txt"))
  for key in ("loss", "masked_lm_loss", "next_sentence_loss", "masked_lm_accuracy",
              "next_sentence_accuracy"):
    assert abs(one_metrics[key] - results[key]) <= 1e-5 * max(1, abs(one_metrics[key])), key


def test_start_timeout_variable(monkeypatch):
  from bert_tf.training import cluster  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv(cluster.START_TIMEOUT_ENV, raising=False)
  assert cluster.start_timeout() == 600
  for text, value in (("2.5", 2.5), ("inf", float("inf"))):
    monkeypatch.setenv(cluster.START_TIMEOUT_ENV, text)
    assert cluster.start_timeout() == value
  for text in ("0", "-1", "ten", "nan"):
    monkeypatch.setenv(cluster.START_TIMEOUT_ENV, text)
    with pytest.raises(cluster.ClusterStartError, match="BERT_TF_WORKER_START_TIMEOUT="):
      cluster.start_timeout()


if __name__ == "__main__":
  _script(sys.argv[1])
