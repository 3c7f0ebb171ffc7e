"""Multi-worker start-up that cannot hang forever.

MultiWorkerMirroredStrategy() waits until every task of the TF_CONFIG cluster has joined, with
no limit, inside TensorFlow's C++ runtime and holding Python's GIL (no Python thread runs, no
Python signal handler either), while TensorFlow's preemption notifier takes SIGTERM and only
logs it. A worker that never appears (a typo in TF_CONFIG, a pod that failed to schedule) left
the others waiting silently for ever, deaf to SIGTERM.

So `create_multi_worker_strategy` first waits in Python until the other tasks are there:

* every task listens on its own TF_CONFIG address while it waits, and connects to the others'
  (a task that is already inside TensorFlow answers through TensorFlow's own server, which
  listens on the same address); when every other task has answered it stops listening and
  creates the strategy, whose own wait is then short;
* after the start-up timeout (the BERT_TF_WORKER_START_TIMEOUT environment variable, in
  seconds; default 600; "inf" waits for ever) it raises ClusterStartError naming the tasks that
  never answered, e.g. `the multi-worker cluster did not start within 600 s: no answer from
  /job:worker/task:1 (10.0.0.2:2222)`, which the commands print as one line (exit status 1);
* a SIGTERM during the wait raises ClusterStartError too ("stopped by SIGTERM while waiting
  for ...").

Once the strategy exists, the SIGTERM action that was there before (by default: terminate) is
put back in place of TensorFlow's notifier (training then handles SIGTERM itself: see
loop.train).

A run that ends well leaves quietly: TensorFlow's coordination service lives in the leader task
(the chief, else worker 0) and watches the others' heartbeats. A task that outlives the leader
by a few seconds prints "failed to connect to all addresses" errors, and a leader that outlives
another task by about ten seconds prints "The following tasks are unhealthy (stopped sending
heartbeats)", though nothing failed. So at exit, once the command says the run ended well
(`finishing`, called by cli.run and for a preempted run by loop.train), every other task waits
for the leader to be done (a key of the coordination service, still heartbeating), and the
leader, once it has set that key, waits until the others have exited (their addresses stop
answering; at most LEAVE_SECONDS) before it exits itself. Both then end at once, without
TensorFlow's teardown (see _end_now). A task that fails leaves at once.

A task lost during the run (killed, frozen, its machine gone) aborts the others' collectives:
at once when its connections close, else when it has sent no heartbeat to the coordination
service for BERT_TF_PEER_TIMEOUT_SECONDS (default 10; configured here, before the strategy
exists, as the strategy would configure the service, with that heartbeat timeout). TensorFlow's
error names the task in one of a few ways; `lost_tasks` reads it (or, when it names none, asks
which tasks no longer accept connections) so that training (loop.train) ends with one line
naming it, e.g. `lost /job:worker/task:1 (10.0.0.2:2222): no heartbeat for 10 s`.
"""

import atexit
import contextlib
import json
import os
import re
import selectors
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Tuple

from absl import logging

START_TIMEOUT_ENV = "BERT_TF_WORKER_START_TIMEOUT"
DEFAULT_START_TIMEOUT = 600.0
# The jobs whose tasks the strategy waits for (those of TensorFlow's coordination service).
_COORDINATED_JOBS = ("chief", "worker")
# Seconds between two rounds of connection attempts, and the limit of one attempt.
_RETRY_SECONDS = 0.5
_CONNECT_SECONDS = 1.0

Task = Tuple[str, str]  # (TensorFlow's task name "/job:worker/task:1", "host:port")


class ClusterStartError(ValueError):
  """The cluster did not start (timeout, SIGTERM) or TF_CONFIG cannot be read."""


def start_timeout() -> float:
  """Seconds to wait for the cluster: BERT_TF_WORKER_START_TIMEOUT, default 600 (inf: none)."""
  text = os.environ.get(START_TIMEOUT_ENV, "").strip()
  if not text:
    return DEFAULT_START_TIMEOUT
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not value > 0:  # also NaN
    raise ClusterStartError(f"{START_TIMEOUT_ENV}={text!r}: expected a positive number of "
                            "seconds (or inf)")
  return value


def cluster_tasks(tf_config: Optional[str] = None) -> Tuple[List[Task], Optional[Task]]:
  """(the chief and worker tasks of TF_CONFIG, this process's task or None)."""
  text = os.environ.get("TF_CONFIG", "") if tf_config is None else tf_config
  try:
    config = json.loads(text or "{}")
  except json.JSONDecodeError as e:
    raise ClusterStartError(f"the TF_CONFIG environment variable is not valid JSON: {e}"
                            ) from None
  if not isinstance(config, dict):
    raise ClusterStartError("the TF_CONFIG environment variable is not a JSON object")
  cluster = config.get("cluster") or {}
  task = config.get("task") or {}
  tasks = []
  for job in _COORDINATED_JOBS:
    addresses = cluster.get(job) or []
    if isinstance(addresses, dict):  # {index: address}, which TensorFlow accepts too
      addresses = [addresses[k] for k in sorted(addresses, key=int)]
    tasks += [(f"/job:{job}/task:{i}", str(address)) for i, address in enumerate(addresses)]
  for name, address in tasks:
    try:
      _host_port(address)
    except ValueError:
      raise ClusterStartError(f"TF_CONFIG: the address of {name} is {address!r}, expected "
                              "host:port") from None
  own_name = f"/job:{task.get('type')}/task:{task.get('index', 0)}"
  own = next((t for t in tasks if t[0] == own_name), None)
  return tasks, own


def _host_port(address: str) -> Tuple[str, int]:
  host, _, port = address.split("://", 1)[-1].rpartition(":")
  return host.strip("[]") or "localhost", int(port)


def answers(address: str, timeout: float = _CONNECT_SECONDS) -> bool:
  """Whether something accepts TCP connections at host:port."""
  host_port = _host_port(address)
  try:
    with socket.create_connection(host_port, timeout=timeout):
      return True  # closed first here, so the listener's port keeps no TIME_WAIT
  except OSError:
    return False


def _describe(tasks: List[Task]) -> str:
  return ", ".join(f"{name} ({address})" for name, address in tasks)


@contextlib.contextmanager
def _listening(address: Optional[str]) -> Iterator[None]:
  """Accepts connections on this task's port (all interfaces, as TensorFlow's server) until
  the block ends; nothing when the port cannot be bound (TensorFlow reports that itself)."""
  if address is None:
    yield
    return
  try:
    port = _host_port(address)[1]
    server = socket.create_server(("", port), reuse_port=False)
  except (OSError, ValueError) as e:
    logging.warning("Cannot listen on %s while waiting for the other tasks: %s", address, e)
    yield
    return
  stop = threading.Event()

  def serve():
    # Each connection is closed after its client closes it: the client's side keeps the
    # TIME_WAIT, so TensorFlow can bind the port as soon as this listener is closed.
    with selectors.DefaultSelector() as selector:
      selector.register(server, selectors.EVENT_READ)
      while not stop.is_set():
        for key, _ in selector.select(timeout=0.1):
          if key.fileobj is server:
            try:
              connection, _ = server.accept()
            except OSError:
              continue
            connection.setblocking(False)
            selector.register(connection, selectors.EVENT_READ)
          else:
            selector.unregister(key.fileobj)
            key.fileobj.close()
      for key in list(selector.get_map().values()):
        if key.fileobj is not server:
          key.fileobj.close()

  thread = threading.Thread(target=serve, name="bert_tf-cluster-presence", daemon=True)
  thread.start()
  try:
    yield
  finally:
    stop.set()
    thread.join()
    server.close()


class _Terminated(BaseException):
  """Raised by the SIGTERM handler; a BaseException, so that no `except Exception` (nor the
  OSError of a connection attempt it interrupts) swallows it."""


@contextlib.contextmanager
def _sigterm_raises(waiting_for: Callable[[], List[Task]]) -> Iterator[None]:
  """A SIGTERM raises ClusterStartError out of the block (main thread only)."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return

  def stop(signum, frame):
    del signum, frame
    raise _Terminated()

  previous = signal.signal(signal.SIGTERM, stop)
  try:
    yield
  except _Terminated:
    missing = waiting_for()
    raise ClusterStartError("stopped by SIGTERM while waiting for the multi-worker cluster to "
                            "start" + (f": no answer yet from {_describe(missing)}"
                                       if missing else "")) from None
  finally:
    signal.signal(signal.SIGTERM, previous)


def wait_for_tasks(timeout: Optional[float] = None) -> List[Task]:
  """Waits until every other chief/worker task of TF_CONFIG accepts connections.

  This task listens on its own address meanwhile, so that the others see it.

  Args:
    timeout: seconds; default start_timeout().

  Returns:
    The other tasks.

  Raises:
    ClusterStartError: the timeout passed or a SIGTERM came, naming the tasks that never
      answered; or TF_CONFIG / BERT_TF_WORKER_START_TIMEOUT cannot be read.
  """
  timeout = start_timeout() if timeout is None else float(timeout)
  tasks, own = cluster_tasks()
  others = [task for task in tasks if task != own]
  missing = list(others)
  if not missing:
    return others
  deadline = time.monotonic() + timeout
  with _sigterm_raises(lambda: missing), _listening(own[1] if own else None):
    logging.info("Waiting up to %g s for the other %d task(s) of TF_CONFIG to start: %s",
                 timeout, len(others), _describe(others))
    while True:
      missing[:] = [task for task in missing if not answers(task[1])]
      if not missing:
        break
      if time.monotonic() >= deadline:
        raise ClusterStartError(
            f"the multi-worker cluster did not start within {timeout:g} s: no answer from "
            f"{_describe(missing)} (not started, or a wrong address in TF_CONFIG); start "
            f"every task of TF_CONFIG, or set {START_TIMEOUT_ENV} to wait longer")
      time.sleep(_RETRY_SECONDS)
  logging.info("Every task of TF_CONFIG answered; creating the strategy")
  return others


def create_multi_worker_strategy(create: Callable[[], Any],
                                 timeout: Optional[float] = None) -> Any:
  """wait_for_tasks(timeout), then `create()` (a MultiWorkerMirroredStrategy), after which a
  SIGTERM ends the process again (TensorFlow's preemption notifier only logs it), and the
  tasks of a run that ends well leave together (see the module docstring)."""
  peer_timeout()  # a wrong value fails before the wait
  wait_for_tasks(timeout)
  main_thread = threading.current_thread() is threading.main_thread()
  previous = signal.getsignal(signal.SIGTERM) if main_thread else None
  tasks, own = cluster_tasks()
  configure_peer_timeout(tasks, own)
  strategy = create()
  if main_thread:
    # Python's record of the handler did not see TensorFlow's: set it again for real.
    signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
  if own is not None and len(tasks) > 1:
    atexit.register(_leave_together, own, tasks)
  return strategy


# === Leaving together ===

# How long the leader waits at exit for the other tasks to exit (they do as soon as it is done).
LEAVE_SECONDS = 30.0
_DONE_KEY = "bert_tf/leader_done"
# The exit status of a run that ended well (0) or was preempted (75), set by `finishing`.
_finished_with: Optional[int] = None


def finishing(status: int) -> None:
  """Records that this process ends as planned with `status` (success, or preempted after the
  save): at exit it then leaves together with the other tasks instead of at once."""
  global _finished_with
  _finished_with = status


def _leave_together(own: Task, tasks: List[Task]) -> None:
  """atexit: the leader (tasks[0], TensorFlow's coordination service) says it is done and waits
  until the others have exited; the others wait until the leader is done."""
  if _finished_with is None:
    return  # a failure: leave at once
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  leader, others = tasks[0], [task for task in tasks[1:]]
  try:
    if own == leader:
      context.context().set_config_key_value(_DONE_KEY, str(_finished_with))
      deadline = time.monotonic() + LEAVE_SECONDS
      while others and time.monotonic() < deadline:
        others = [task for task in others if answers(task[1], timeout=0.5)]
        if others:
          time.sleep(0.1)
      if others:
        logging.warning("Leaving before %s, still running %g s after this run ended",
                        _describe(others), LEAVE_SECONDS)
    else:
      context.context().get_config_key_value(_DONE_KEY)  # waits for it
  except Exception as e:  # pylint: disable=broad-except
    # The leader is gone (it failed): nothing to wait for.
    logging.warning("Not waiting for the other tasks at exit: %s", " ".join(str(e).split()))
  _end_now(_finished_with)


def _end_now(status: int) -> None:
  """Ends the process with `status` without TensorFlow's teardown. Everything is written by
  now (checkpoints, exports, summaries); the teardown takes seconds (2 s for a worker and 7 s for
  the leader on a quiet machine, several times that on a loaded one) and stops this task's
  heartbeats before the process ends and its address stops answering, so a leader still
  waiting for it would see a task "stopped sending heartbeats" and print an error."""
  logging.flush()
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  logs = sys.modules.get("bert_tf.logs")
  if logs is not None:
    logs.restore_stderr()  # the filter prints what it holds
  os._exit(status)  # pylint: disable=protected-access


# === A lost or frozen worker ===

# A task silent for this long (no heartbeat to TensorFlow's coordination service: killed,
# frozen, its machine gone or cut off) is lost: the collectives of every other task are aborted
# and training ends with one line naming it (stopping.WorkerLost, exit status 75).
PEER_TIMEOUT_ENV = "BERT_TF_PEER_TIMEOUT_SECONDS"
DEFAULT_PEER_TIMEOUT = 10.0  # TensorFlow's own default heartbeat timeout
# TensorFlow's names of the errors a lost task gives the others: a connection reset or refused
# (killed), no heartbeat (frozen), a heartbeat that found no coordination service (the leader
# lost), or the abort the coordination service sends every task then.
_PEER_ERROR_TYPES = ("UnavailableError", "DeadlineExceededError", "AbortedError",
                     "CancelledError")
_PEER_ERROR_MARKERS = ("Collective ops is aborted", "stopped sending heartbeats",
                       "CoordinationService", "Connection reset", "Connection refused",
                       "failed to connect to all addresses", "Socket closed", "heartbeat")
_TASK_NAME = re.compile(r"/job:(chief|worker)(?:/replica:\d+)?/task:(\d+)")
_UNHEALTHY = re.compile(r"stopped sending heartbeats\):?((?:\s*,?\s*/job:\w+(?:/replica:\d+)?"
                        r"/task:\d+)+)")


def peer_timeout() -> float:
  """Seconds without a heartbeat after which a task is lost: BERT_TF_PEER_TIMEOUT_SECONDS,
  default 10."""
  text = os.environ.get(PEER_TIMEOUT_ENV, "").strip()
  if not text:
    return DEFAULT_PEER_TIMEOUT
  try:
    value = float(text)
  except ValueError:
    value = -1.0
  if not 1 <= value < 86400:  # also NaN; TensorFlow takes whole milliseconds
    raise ClusterStartError(f"{PEER_TIMEOUT_ENV}={text!r}: expected a number of seconds from "
                            "1 to 86400")
  return value


def configure_peer_timeout(tasks: List[Task], own: Optional[Task]) -> None:
  """Configures TensorFlow's coordination service as MultiWorkerMirroredStrategy would (the
  chief and worker jobs, the chief or else worker 0 leading), with peer_timeout() as its
  heartbeat timeout. Call before the strategy is created."""
  from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  timeout = peer_timeout()
  if own is None or len(tasks) < 2 or context.context().coordination_service is not None:
    return  # not a coordinated task, or configured already (then left as it is)
  counts = {}
  for name, _ in tasks:
    job = _TASK_NAME.match(name).group(1)
    counts[job] = counts.get(job, 0) + 1
  leader = _TASK_NAME.match(tasks[0][0])
  context.context().configure_coordination_service(
      service_type="standalone",
      service_leader=f"/job:{leader.group(1)}/replica:0/task:{leader.group(2)}",
      coordinated_jobs=[coordination_config_pb2.CoordinatedJob(name=job, num_tasks=count)
                        for job, count in counts.items()],
      heartbeat_timeout_in_ms=int(timeout * 1000))


class LostTasks(NamedTuple):
  """The tasks a peer failure names (or, when it names none, those not answering), and why."""
  tasks: List[Task]
  reason: str


def lost_tasks(error: BaseException) -> Optional[LostTasks]:
  """Which other task of TF_CONFIG an error of a multi-worker run says is lost; None when the
  error is not about a lost task (or this process has no other task)."""
  text = " ".join(str(getattr(error, "message", None) or error).split())
  try:
    tasks, own = cluster_tasks()
  except ClusterStartError:
    return None
  others = [task for task in tasks if task != own]
  if not others or not (type(error).__name__ in _PEER_ERROR_TYPES or
                        any(marker in text for marker in _PEER_ERROR_MARKERS)):
    return None

  def named(part):
    names = {f"/job:{m.group(1)}/task:{m.group(2)}" for m in _TASK_NAME.finditer(part)}
    return [task for task in others if task[0] in names]

  try:
    timeout = peer_timeout()
  except ClusterStartError:
    timeout = DEFAULT_PEER_TIMEOUT
  unhealthy = _UNHEALTHY.search(text)
  if unhealthy and named(unhealthy.group(1)):
    return LostTasks(named(unhealthy.group(1)), f"no heartbeat for {timeout:g} s")
  if "CoordinationService" in text and own != tasks[0] and not named(text):
    # This task's heartbeats went unanswered: the leader, which runs the service, is lost.
    return LostTasks([tasks[0]], "its coordination service stopped answering this task's "
                     "heartbeats")
  if named(text):
    return LostTasks(named(text), "its connection was lost")
  silent = [task for task in others if not answers(task[1])]
  if silent:
    return LostTasks(silent, "it does not answer")
  return LostTasks([], f"{_first_words(text)}; every other task still accepts connections: "
                   f"{_describe(others)}")


def _first_words(text: str, limit: int = 120) -> str:
  """The start of TensorFlow's message, without its graph location."""
  text = re.sub(r"^Graph execution error: Detected at node \S+ defined at \(most recent call "
                r"last\):(?: File \"[^\"]*\", line \d+, in \S+)*\s*", "", text)
  text = re.sub(r"\s*\[\[\{\{node \S+\}\}\]\]\s*$", "", text)
  return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def describe_tasks(tasks: List[Task]) -> str:
  """'/job:worker/task:1 (host:port)', joined with commas."""
  return _describe(tasks)


def describe_loss(lost: LostTasks) -> str:
  """'lost /job:worker/task:1 (host:port): <why>', the start of a lost worker's line."""
  return (f"lost {_describe(lost.tasks)}: {lost.reason}" if lost.tasks else
          f"lost a worker ({lost.reason})")
