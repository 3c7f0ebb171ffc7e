"""A worker of a multi-worker run lost during training (killed, frozen, its machine gone) ends
every other worker within BERT_TF_PEER_TIMEOUT_SECONDS plus a few seconds, with one line naming
the lost task, the step, the last checkpoint and how to resume, and exit status 75 (issue 38,
point 2).

TensorFlow's messages as a surviving worker gets them (from runs of two localhost workers of
run_pretraining) are read in process; the real command runs as two worker processes, one of
which is killed (SIGKILL) or frozen (SIGSTOP) after the first checkpoint. Resuming with every
worker relaunched is tested in test_preemption.py.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest
import tensorflow as tf

from bert_tf.training import cluster
from bert_tf.training import run_folder, stopping
from tests import helpers
from tests.training.test_distributed import _free_ports

# The start of every message: where the collective that failed was defined.
_GRAPH = ("Graph execution error: Detected at node CollectiveReduceV2 defined at (most recent "
          "call last): File \"<frozen runpy>\", line 198, in _run_module_as_main File "
          "\"/work/main/bert_tf/training/loop.py\", line 709, in agree ")
# Worker 0's, when worker 1 was killed during a collective.
KILLED = (_GRAPH + "Collective ops is aborted by: recvmsg:Connection reset by peer\nAdditional "
          "GRPC error information from remote target /job:worker/replica:0/task:1 while calling "
          "/tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from peer "
          "{grpc_message:\"recvmsg:Connection reset by peer\", grpc_status:14} The error could "
          "be from a previous operation. Restart your program to reset. "
          "[[{{node CollectiveReduceV2}}]]")
# Worker 0's (the coordination service's task), when worker 1 stopped sending heartbeats.
FROZEN = (_GRAPH + "Collective ops is aborted by: Error reported from /job:worker/task:1: The "
          "following tasks are unhealthy (stopped sending heartbeats):\n"
          "/job:worker/replica:0/task:1\nThe tasks have crashed. Check the task logs for an "
          "earlier error, or scheduler events (e.g. preemption, eviction) to debug further. "
          "The error could be from a previous operation. Restart your program to reset. "
          "[[{{node CollectiveReduceV2}}]]")
# Worker 1's, when worker 0 (which runs the coordination service) froze.
LEADER_FROZEN = (_GRAPH + "Collective ops is aborted by: Deadline Exceeded\n\nRPC: "
                 "/tensorflow.CoordinationService/Heartbeat The error could be from a previous "
                 "operation. Restart your program to reset. [[{{node CollectiveReduceV2_1}}]]")


def _set_cluster(monkeypatch, ports, index):
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
      "task": {"type": "worker", "index": index}}))


def test_the_task_a_peer_failure_names_is_the_lost_one(monkeypatch):
  ports = _free_ports(2)
  workers = [(f"/job:worker/task:{i}", f"127.0.0.1:{port}") for i, port in enumerate(ports)]
  monkeypatch.setenv(cluster.PEER_TIMEOUT_ENV, "3")
  _set_cluster(monkeypatch, ports, 0)
  killed = cluster.lost_tasks(tf.errors.UnavailableError(None, None, KILLED))
  assert killed == ([workers[1]], "its connection was lost")
  frozen = cluster.lost_tasks(tf.errors.UnavailableError(None, None, FROZEN))
  assert frozen == ([workers[1]], "no heartbeat for 3 s")
  # Worker 1 sees the leader's service stop answering: worker 0 is lost, whoever else is named.
  _set_cluster(monkeypatch, ports, 1)
  leader = cluster.lost_tasks(tf.errors.DeadlineExceededError(None, None, LEADER_FROZEN))
  assert leader == ([workers[0]], "its coordination service stopped answering this task's "
                    "heartbeats")
  assert cluster.describe_tasks(leader.tasks) == f"/job:worker/task:0 (127.0.0.1:{ports[0]})"


def test_a_failure_naming_no_task_names_those_that_do_not_answer(monkeypatch):
  chief, worker0, worker1 = _free_ports(3)
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"chief": [f"127.0.0.1:{chief}"],
                  "worker": [f"127.0.0.1:{worker0}", f"127.0.0.1:{worker1}"]},
      "task": {"type": "worker", "index": 0}}))
  error = tf.errors.AbortedError(None, None, _GRAPH + "Collective ops is aborted by: Cancelled")
  present = socket.create_server(("127.0.0.1", worker1))  # the chief does not listen
  try:
    assert cluster.lost_tasks(error) == ([("/job:chief/task:0", f"127.0.0.1:{chief}")],
                                         "it does not answer")
    chief_server = socket.create_server(("127.0.0.1", chief))
    try:
      # Every task answers (a frozen process's port still does): none can be named.
      lost = cluster.lost_tasks(error)
    finally:
      chief_server.close()
  finally:
    present.close()
  assert lost.tasks == []
  assert lost.reason == (
      f"Collective ops is aborted by: Cancelled; every other task still accepts connections: "
      f"/job:chief/task:0 (127.0.0.1:{chief}), /job:worker/task:1 (127.0.0.1:{worker1})")


def test_other_errors_are_not_a_lost_worker(monkeypatch):
  ports = _free_ports(2)
  _set_cluster(monkeypatch, ports, 0)
  for error in (tf.errors.InvalidArgumentError(None, None, "Expected int64, got float"),
                tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor"),
                ValueError("not a TensorFlow error")):
    assert cluster.lost_tasks(error) is None, error
  monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                                              "task": {"type": "worker", "index": 0}}))
  assert cluster.lost_tasks(tf.errors.UnavailableError(None, None, KILLED)) is None
  monkeypatch.delenv("TF_CONFIG")
  assert cluster.lost_tasks(tf.errors.UnavailableError(None, None, KILLED)) is None


def test_peer_timeout_variable(monkeypatch):
  monkeypatch.delenv(cluster.PEER_TIMEOUT_ENV, raising=False)
  assert cluster.peer_timeout() == cluster.DEFAULT_PEER_TIMEOUT == 10
  monkeypatch.setenv(cluster.PEER_TIMEOUT_ENV, "2.5")
  assert cluster.peer_timeout() == 2.5
  for text in ("0", "0.5", "-1", "soon", "nan", "inf"):
    monkeypatch.setenv(cluster.PEER_TIMEOUT_ENV, text)
    with pytest.raises(cluster.ClusterStartError, match="BERT_TF_PEER_TIMEOUT_SECONDS="):
      cluster.peer_timeout()


def test_the_exit_status_is_the_restartable_one():
  from bert_tf import cli  # pylint: disable=g-import-not-at-top
  lost = stopping.WorkerLost([], 3, None, "lost a worker")
  assert isinstance(lost, SystemExit) and lost.code == stopping.EXIT_WORKER_LOST
  assert stopping.EXIT_WORKER_LOST == stopping.EXIT_PREEMPTED == cli.EXIT_PREEMPTED == 75
  assert lost.exit_at_once  # cli.run skips TensorFlow's teardown, which waits for the lost task


class _Manager:
  """What stopping.worker_loss reads of a tf.train.CheckpointManager."""

  def __init__(self, directory):
    self.directory = directory


def _multi_worker_strategy():
  """An (unused) MultiWorkerMirroredStrategy object: _worker_loss only asks what it is, and a
  real one would set up collectives in this test process."""
  return object.__new__(tf.distribute.MultiWorkerMirroredStrategy)


@pytest.mark.parametrize("chief", [True, False])
def test_a_lost_worker_during_training_is_one_line_and_worker_lost(monkeypatch, tmp_path,
                                                                    caplog, chief):
  ports = _free_ports(2)
  _set_cluster(monkeypatch, ports, 0 if chief else 1)
  run_dir = tmp_path / "run"
  run_dir.mkdir()
  for name in ("ckpt-5.index", "ckpt-10.index", "ckpt-15.data-00000-of-00001"):
    (run_dir / name).write_text("")  # ckpt-15 has no index: its save did not finish
  scratch = run_dir / ".worker_1_tmp"
  scratch.mkdir()
  manager = _Manager(str(run_dir if chief else scratch))
  error = (tf.errors.UnavailableError(None, None, KILLED) if chief else
           tf.errors.DeadlineExceededError(None, None, LEADER_FROZEN))
  with pytest.raises(stopping.WorkerLost) as lost:
    with stopping.worker_loss(_multi_worker_strategy(), manager, chief, 100, lambda: 17):
      raise error
  other = 1 if chief else 0
  expected = (
      f"lost /job:worker/task:{other} (127.0.0.1:{ports[other]}): "
      + ("its connection was lost" if chief else
         "its coordination service stopped answering this task's heartbeats")
      + f"; training stopped at step 17/100; the last checkpoint is {run_dir}/ckpt-10: "
      "relaunch every worker with the same command to resume from step 10 (exit status 75)")
  assert lost.value.message == expected
  assert (lost.value.step, lost.value.checkpoint) == (17, f"{run_dir}/ckpt-10")
  assert lost.value.tasks == [(f"/job:worker/task:{other}", f"127.0.0.1:{ports[other]}")]
  assert lost.value.code == 75
  assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [expected]
  assert scratch.exists() == chief  # a worker's scratch copies go, as when training ends


def test_other_errors_in_training_pass_and_one_process_runs_are_left_alone(monkeypatch,
                                                                          tmp_path):
  _set_cluster(monkeypatch, _free_ports(2), 0)
  manager = _Manager(str(tmp_path))
  bad_data = tf.errors.InvalidArgumentError(None, None, "Expected int64, got float")
  with pytest.raises(tf.errors.InvalidArgumentError):
    with stopping.worker_loss(_multi_worker_strategy(), manager, True, 100, lambda: 3):
      raise bad_data
  # No other worker: the error is TensorFlow's, whatever it says.
  with pytest.raises(tf.errors.UnavailableError):
    with stopping.worker_loss(tf.distribute.OneDeviceStrategy("/cpu:0"), manager, True, 100,
                           lambda: 3):
      raise tf.errors.UnavailableError(None, None, KILLED)
  with pytest.raises(stopping.WorkerLost,
                     match="no checkpoint was saved yet: relaunch every worker "
                     r"with the same command to start again \(exit status 75\)$"):
    with stopping.worker_loss(_multi_worker_strategy(), manager, True, 100, lambda: 3):
      raise tf.errors.UnavailableError(None, None, FROZEN)


def test_checkpoints_that_cannot_be_listed_still_give_the_line(monkeypatch, tmp_path):
  _set_cluster(monkeypatch, _free_ports(2), 1)

  def unreachable(output_dir):
    raise tf.errors.UnavailableError(None, None, f"{output_dir}: the bucket does not answer")

  monkeypatch.setattr(run_folder, "run_checkpoints", unreachable)
  scratch = tmp_path / ".worker_1_tmp"
  with pytest.raises(stopping.WorkerLost) as lost:
    with stopping.worker_loss(_multi_worker_strategy(), _Manager(str(scratch)), False, 100,
                           lambda: 8):
      raise tf.errors.UnavailableError(None, None, FROZEN.replace("task:1", "task:0"))
  assert lost.value.checkpoint is None
  assert lost.value.message.endswith(
      f"training stopped at step 8/100; relaunch every worker with the same command to resume "
      f"from the newest checkpoint in {tmp_path} (exit status 75)")


# === Two workers of the command, one lost ===

PEER_TIMEOUT = 3
# The bound the README gives: the peer timeout plus 5 s.
BOUND = PEER_TIMEOUT + 5
STEPS = 10 ** 5


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  return helpers.write_pretraining_inputs(str(tmp_path_factory.mktemp("lost_worker")))


def _lose_worker_1(command, logs, when_line, signal_name, after=0.0):
  """Two localhost workers of `command`; once worker 0 logs when_line (and `after` seconds
  more), worker 1 gets signal_name. Returns (worker 0's exit status, seconds from the signal to
  its end, worker 0's output, the ports)."""
  ports = _free_ports(2)
  workers = helpers.start_workers(command, ports, logs,
                                  BERT_TF_PEER_TIMEOUT_SECONDS=str(PEER_TIMEOUT))
  try:
    helpers.wait_for_line(logs[0], when_line, workers[0])
    time.sleep(after)
    workers[1].send_signal(getattr(signal, signal_name))
    sent = time.time()
    try:
      workers[0].wait(timeout=60)
    except subprocess.TimeoutExpired:
      pass
    ended = time.time() - sent
  finally:
    for worker in workers:  # worker 1 (a stopped process dies of SIGKILL too), and any left
      if worker.poll() is None:
        worker.kill()
        worker.wait()
  return workers[0].returncode, ended, helpers.read_text(logs[0]), ports


# A fine-tuning command's run: the classifier fixture (360 examples, batch 16), long enough.
CLASSIFIER_EPOCHS = 1000
CLASSIFIER_STEPS = int(360 / 16 * CLASSIFIER_EPOCHS)


@pytest.mark.slow
# A killed worker (its connections close) and a frozen one (only the heartbeat tells), each
# with one of the two drivers: the cluster code that notices them is the same for both.
@pytest.mark.parametrize("command,signal_name", [("run_pretraining", "SIGSTOP"),
                                                 ("run_classifier", "SIGKILL")])
def test_a_lost_worker_ends_the_other_with_one_line_naming_it(workdir, tmp_path, command,
                                                              signal_name):
  run_dir = str(tmp_path / "run")
  logs = [str(tmp_path / "worker0.log"), str(tmp_path / "worker1.log")]
  every_5 = ("--save_checkpoints_steps=5", "--iterations_per_loop=5")
  if command == "run_pretraining":
    steps = STEPS
    args = helpers.pretraining_command(workdir, run_dir, f"--num_train_steps={STEPS}", *every_5)
  else:
    steps = CLASSIFIER_STEPS
    args = helpers.tiny_classifier_command(tmp_path, run_dir, "--do_train",
                                           f"--num_train_epochs={CLASSIFIER_EPOCHS}",
                                           "--export=false", *every_5)
  code, ended, output, ports = _lose_worker_1(args, logs, "Saved checkpoint", signal_name)
  assert code == stopping.EXIT_WORKER_LOST == 75, output[-3000:]
  assert ended < BOUND, (ended, output[-3000:])
  assert "Graph execution error" not in output
  last = output.splitlines()[-1]
  found = re.search(r"training stopped at step (\d+)/(\d+); the last checkpoint is (\S+): ", last)
  assert found, output[-3000:]
  step, checkpoint = int(found.group(1)), found.group(3)
  saved = int(checkpoint.rsplit("-", 1)[1])
  assert int(found.group(2)) == steps and 5 <= saved <= step and saved % 5 == 0
  assert checkpoint == os.path.join(run_dir, f"ckpt-{saved}")
  assert tf.train.latest_checkpoint(run_dir) == checkpoint
  why = "no heartbeat for 3 s" if signal_name == "SIGSTOP" else \
      "(its connection was lost|no heartbeat for 3 s|it does not answer)"
  assert re.search(
      rf"\] lost /job:worker/task:1 \(127\.0\.0\.1:{ports[1]}\): {why}; training stopped at step "
      rf"{step}/{steps}; the last checkpoint is {re.escape(checkpoint)}: relaunch every worker "
      rf"with the same command to resume from step {saved} \(exit status 75\)$", last), last


# === Outside training (while the model is built, evaluated or exported) ===


def test_a_worker_lost_outside_training_is_one_restartable_line(monkeypatch, tmp_path, caplog):
  """cli.run turns the error a lost worker gives outside training into the same kind of line
  and exit status 75; other errors keep their message and status 1."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from bert_tf import cli  # pylint: disable=g-import-not-at-top
  ports = _free_ports(2)
  _set_cluster(monkeypatch, ports, 0)
  run_dir = tmp_path / "run"
  run_dir.mkdir()
  (run_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-20"\n')
  (run_dir / "ckpt-20.index").write_text("")

  def define(flag_values):
    flags.DEFINE_string("output_dir", None, "", flag_values=flag_values)

  def run(error):
    def main(argv):
      del argv
      raise error
    with pytest.raises(SystemExit) as ended:
      cli.run(main, define, "run_pretraining", argv=["run_pretraining",
                                                     f"--output_dir={run_dir}"],
              flag_values=flags.FlagValues())
    return ended.value.code

  assert run(tf.errors.UnavailableError(None, None, KILLED)) == 75
  assert caplog.records[-1].getMessage() == (
      f"lost /job:worker/task:1 (127.0.0.1:{ports[1]}): its connection was lost; the run "
      f"stopped outside training (while building, evaluating or exporting the model); the "
      f"last checkpoint is {run_dir / 'ckpt-20'}: relaunch every worker with the same command "
      f"to resume from it (exit status 75)")
  assert run(tf.errors.InvalidArgumentError(None, None, "Expected int64, got float")) == 1


@pytest.mark.slow
def test_a_worker_lost_during_the_final_evaluation_ends_the_other_with_one_line(workdir,
                                                                                 tmp_path):
  run_dir = str(tmp_path / "run")
  logs = [str(tmp_path / "worker0.log"), str(tmp_path / "worker1.log")]
  code, ended, output, ports = _lose_worker_1(
      helpers.pretraining_command(workdir, run_dir, "--num_train_steps=4",
                                  "--save_checkpoints_steps=2", "--do_eval",
                                  f"--max_eval_steps={STEPS}", "--eval_batch_size=8"),
      logs, "Evaluating ", "SIGKILL", after=2.0)  # into the evaluation's batches
  assert code == 75, output[-3000:]
  assert ended < 30, (ended, output[-3000:])
  assert "Graph execution error" not in output.splitlines()[-1]
  assert re.search(
      rf"\] lost /job:worker/task:1 \(127\.0\.0\.1:{ports[1]}\): [^;]+; the run stopped outside "
      rf"training \(while building, evaluating or exporting the model\); the last checkpoint is "
      rf"{re.escape(os.path.join(run_dir, 'ckpt-4'))}: relaunch every worker with the same "
      rf"command to resume from it \(exit status 75\)$", output.splitlines()[-1]), output[-3000:]
