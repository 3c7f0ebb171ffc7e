"""Stopping a run on time: SIGTERM (preemption) saves the step reached and exits with
EXIT_PREEMPTED; a lost or frozen worker ends the others with EXIT_WORKER_LOST. Both resume by
running the same command again."""

import contextlib
import os
import select
import signal
import socket
import threading
import time
from typing import Callable, Optional, Tuple

from absl import logging
import tensorflow as tf

from bert_tf import io
from bert_tf.training import run_folder
from bert_tf.training.errors import TrainingError


# === Stopping on SIGTERM (preemption) ===

# The exit status of a run that SIGTERM stopped after it saved a checkpoint at the step it had
# reached: EX_TEMPFAIL of sysexits.h ("a temporary failure; the user is invited to retry").
# Not 143 (128 + SIGTERM), which a process killed by SIGTERM before it could save reports too:
# a distinct status tells a cluster manager or a script that the run is whole and that running
# the same command again resumes it with no step lost.
EXIT_PREEMPTED = 75
# How long one call of the training step may run before the loop looks for a SIGTERM again
# (seconds, measured from the steps before): the bound between the signal and the save, plus
# one step and the save itself. TPU VMs, GCE and Kubernetes allow about 30 s by default.
STOP_CHECK_ENV = "BERT_TF_STOP_CHECK_SECONDS"
DEFAULT_STOP_CHECK_SECONDS = 5.0
# Steps per call when nothing is measured yet (the first call also traces the step).
_FIRST_CALL_STEPS = 1
# Proposals are summed over the replicas as float32: exact below 2**24.
_MAX_CALL_STEPS = 1 << 20


class Preempted(SystemExit):
  """SIGTERM stopped training after the checkpoint of the step reached was saved.

  A SystemExit with the status EXIT_PREEMPTED: no `except Exception` takes it for a failure
  (and a fine-tuning run's clean-up keeps what it wrote), and a command that does not catch it
  exits with that status.

  Attributes:
    step: the step reached and saved.
    checkpoint: the saved checkpoint's prefix (in output_dir).
  """

  def __init__(self, step: int, checkpoint: str):
    super().__init__(EXIT_PREEMPTED)
    self.step = step
    self.checkpoint = checkpoint


# The longest training goes without a progress line (a line ends every --iterations_per_loop
# steps; a longer interval also gets lines on the way, the metrics of its steps so far).
PROGRESS_SECONDS = 30.0


def stop_check_seconds() -> float:
  """BERT_TF_STOP_CHECK_SECONDS (default 5): the longest a call of the training step runs
  before the loop looks for a SIGTERM again."""
  text = os.environ.get(STOP_CHECK_ENV, "").strip()
  if not text:
    return DEFAULT_STOP_CHECK_SECONDS
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not 0 < value < float("inf"):  # also NaN
    raise TrainingError(f"{STOP_CHECK_ENV}={text!r}: expected a positive number of seconds")
  return value


class StopRequest:
  """Records a SIGTERM while installed (main thread only: Python runs signal handlers there).

  Python runs the handler when the main thread is back in Python, after the current call of
  the training step, which is when the loop looks at it; the moment the signal came is taken
  from the wake-up file descriptor that the C-level handler writes at once (a thread waits on
  it), so the log says how long the save took after the signal. A second SIGTERM changes
  nothing.
  """

  def __init__(self):
    self.signalled_at: Optional[float] = None
    self._arrived_at: Optional[float] = None

  def _handle(self, signum, frame):
    del signum, frame
    if self.signalled_at is None:
      self.signalled_at = self._arrived_at or time.time()

  @property
  def requested(self) -> bool:
    return self.signalled_at is not None

  def _watch(self, reader: socket.socket, done: threading.Event) -> None:
    while not done.is_set():
      try:
        ready, _, _ = select.select([reader], [], [], 0.2)
        data = reader.recv(64) if ready else b""
      except OSError:
        return
      if self._arrived_at is None and signal.SIGTERM in data:
        self._arrived_at = time.time()

  @contextlib.contextmanager
  def installed(self):
    if threading.current_thread() is not threading.main_thread():
      yield self
      return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    done = threading.Event()
    watcher = threading.Thread(target=self._watch, args=(reader, done), daemon=True,
                               name="bert_tf-sigterm-time")
    previous = signal.signal(signal.SIGTERM, self._handle)
    previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    watcher.start()
    try:
      yield self
    finally:
      signal.set_wakeup_fd(previous_fd)
      signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
      done.set()
      watcher.join()
      reader.close()
      writer.close()


def agreement(strategy) -> Callable[[bool, int], Tuple[bool, int]]:
  """(this worker's stop request, its proposed steps per call) -> what every worker does.

  With several workers the stop requests and proposals are summed over the replicas (one small
  collective per call of the step): all stop after the same step when any of them was
  signalled, and all run the same number of steps in the next call (the mean proposal; whole
  numbers, so the float sum is exact and the same everywhere). Other strategies have one
  process: its own values.
  """
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return lambda stop, steps: (stop, steps)
  replicas = strategy.num_replicas_in_sync

  @tf.function(autograph=False)
  def agree(values):
    per_replica = strategy.run(lambda: tf.identity(values))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

  def decide(stop, steps):
    total = agree(tf.constant([float(stop), float(steps)], tf.float32)).numpy()
    return bool(total[0] > 0), max(1, int(total[1]) // replicas)

  return decide


def call_steps(seconds_per_step: Optional[float], budget: float) -> int:
  """Steps one call may run to end within `budget` seconds at the measured rate."""
  if seconds_per_step is None:
    return _FIRST_CALL_STEPS
  return int(max(1, min(_MAX_CALL_STEPS, budget // max(seconds_per_step, 1e-9))))


def stop_and_save(manager, step: int, num_train_steps: int, chief: bool,
                   signalled_at: Optional[float]) -> Preempted:
  """Saves the checkpoint of `step` (unless the last save was of that step), logs one line and
  returns the Preempted to raise. signalled_at: when this process got the SIGTERM (None: another
  worker got it)."""
  latest = manager.latest_checkpoint
  path = latest if latest and run_folder.checkpoint_step(latest) == step else \
      manager.save(checkpoint_number=step)
  if not chief:
    # This worker's copy went to its scratch directory; the chief's is in output_dir.
    path = os.path.join(os.path.dirname(manager.directory), os.path.basename(path))
  when = ("another worker got SIGTERM" if signalled_at is None else
          f"{time.time() - signalled_at:.1f} s after the signal")
  logging.warning(
      "SIGTERM: stopped at step %d/%d and saved checkpoint %s (%s); run the same command "
      "again to resume from step %d (exit status %d)", step, num_train_steps, path, when, step,
      EXIT_PREEMPTED)
  return Preempted(step, path)


# === A lost or frozen worker ===

# A worker lost during training (killed, frozen, its machine gone: see training/cluster.py and
# BERT_TF_PEER_TIMEOUT_SECONDS) ends the others with the same status as a preemption: the run
# is restartable, and relaunching every worker with the same command resumes it, from the last
# periodic checkpoint (the steps after it are lost).
EXIT_WORKER_LOST = EXIT_PREEMPTED


class WorkerLost(SystemExit):
  """Another worker of a multi-worker run was lost during training; one line said which, the
  step, the last checkpoint and how to resume. A SystemExit with the status EXIT_WORKER_LOST.

  Attributes:
    tasks: the lost tasks of TF_CONFIG, [(name, host:port)] (empty when none could be named).
    step: the step training had reached.
    checkpoint: the newest checkpoint in output_dir, None when there is none.
    message: the line.
  """

  def __init__(self, tasks, step: int, checkpoint: Optional[str], message: str):
    super().__init__(EXIT_WORKER_LOST)
    # The command ends the process at once (cli.run): TensorFlow's teardown would wait for the
    # lost task.
    self.exit_at_once = True
    self.tasks = tasks
    self.step = step
    self.checkpoint = checkpoint
    self.message = message

  def __str__(self):
    return self.message


@contextlib.contextmanager
def worker_loss(strategy, manager, chief: bool, num_train_steps: int,
                 reached: Callable[[], int]):
  """Turns the errors that a lost worker gives the others (a collective aborted, a heartbeat
  unanswered) into WorkerLost, after one line; other errors pass. Multi-worker runs only."""
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    yield
    return
  try:
    yield
  except tf.errors.OpError as e:
    from bert_tf.training import cluster  # pylint: disable=g-import-not-at-top
    lost = cluster.lost_tasks(e)
    if lost is None:
      raise
    output_dir = manager.directory if chief else os.path.dirname(manager.directory)
    try:
      saved = [path for path in run_folder.run_checkpoints(output_dir)
               if io.exists(path + ".index")]
    except (OSError, tf.errors.OpError) as listing:
      logging.warning("Cannot list the checkpoints in %s: %s", output_dir, listing)
      saved = None
    checkpoint = saved[0] if saved else None
    step = reached()
    who = cluster.describe_loss(lost)
    relaunch = "relaunch every worker with the same command to"
    resume = (f"the last checkpoint is {checkpoint}: {relaunch} resume from step "
              f"{run_folder.checkpoint_step(checkpoint)}" if checkpoint else
              f"{relaunch} resume from the newest checkpoint in {output_dir}" if saved is None
              else f"no checkpoint was saved yet: {relaunch} start again")
    message = (f"{who}; training stopped at step {step}/{num_train_steps}; {resume} (exit "
               f"status {EXIT_WORKER_LOST})")
    if not chief:
      try:
        io.remove(manager.directory)
      except (OSError, tf.errors.OpError) as removing:  # the line matters more than the copies
        logging.warning("Cannot remove %s: %s", manager.directory, removing)
    logging.error("%s", message)
    raise WorkerLost(lost.tasks, step, checkpoint, message) from None
