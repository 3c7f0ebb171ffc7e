"""Quiet logs for the commands: TensorFlow's routine lines hidden, everything else shown.

A command (cli.run) prints its own lines -- progress with rate and ETA, results, warnings,
errors -- and, unless asked for everything, hides what TensorFlow prints on every run, in three
ways (KNOWN_LINES is what every command still printed with the first two alone, on x86-64
without AVX-512 or an NVIDIA driver):

  * TF_CPP_MIN_LOG_LEVEL=1, unless the variable is set: TensorFlow's C++ INFO lines (CUDA
    probing, the oneDNN and CPU feature notices, XLA service, MLIR, record and iterator lines).
    WARNING, ERROR and FATAL lines from C++ still print.
  * The INFO records that TensorFlow's Python code logs (per export: signatures "with unsupported
    characters which will be renamed", "Sharding callback duration", "Assets written to",
    "Writing fingerprint to"), through its logger or absl's.
  * KNOWN_LINES, the harmless lines that the log level does not stop, removed from file
    descriptor 2 by a small filter process: the failed cuInit of TensorFlow's CUDA build on a
    machine without an NVIDIA driver (every process), the GeneratorDataset warning of every
    `from_generator` input, XLA's "Compiled cluster" line and the absl notice before it (absl's
    C++ logging ignores TF_CPP_MIN_LOG_LEVEL), and "oneDNN supports DT_INT64 only on platforms
    with AVX-512" (oneDNN, which the commands choose, on a CPU without AVX-512: raw-text graphs
    concatenate ragged tensors, which transposes int64 row indices, and TensorFlow says once
    that it keeps its own kernel there). C++ and Python writes alike pass through the filter;
    every other line (other ERROR lines, FATAL lines, Python tracebacks, partial lines) passes
    unchanged, and when the command dies, the filter still prints everything written before. A
    line matches only by its log prefix, level, source file and message together.

The original's verbose dumps (every trainable variable, the first examples' tokens and ids, the
input features), which the commands log as the original did, are left out too, each kind
replaced by one line that names the flag showing it (hide_original_dumps).

Everything back: `--verbosity=1` (`-v 1`: absl's flag, which also turns on DEBUG logging) or
BERT_TF_VERBOSE=1 in the environment; TF_CPP_MIN_LOG_LEVEL=0 brings the C++ INFO lines back.

Only the standard library at module level: the filter process imports this module alone.
"""

import logging
import os
import re
import select
import signal
import subprocess
import sys
from typing import NamedTuple, Optional, Pattern

VERBOSE_ENV = "BERT_TF_VERBOSE"
NVIDIA_DRIVER = "/proc/driver/nvidia"

# TensorFlow's C++ log prefix ("2026-11-25 06:03:22.066037: I external/.../x.cc:31] ") and
# absl's ("I0000 00:00:1795586619.961743    5860 x.h:196] ", also absl's Python format).
_PREFIX = re.compile(rb"(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) (\S+)"
                     rb"|([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ (\S+)):\d+\] ")


# How TensorFlow wraps an op's error message: the function it ran in, the op, an empty name.
_TF_OP_WRAPPING = re.compile(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\](\s*name:\s*$)?")


def without_tf_wrapping(message: str) -> str:
  """A TensorFlow error message without its wrapping ("{{function_node ...}}", "[Op:SaveV2]",
  a trailing empty "name:"), e.g. "truncated record at 999810' failed with ..."."""
  return _TF_OP_WRAPPING.sub(" ", message).strip()


class KnownLine(NamedTuple):
  """A harmless line: its level, its source file (basename) and its message."""
  level: bytes
  source: bytes
  message: Pattern[bytes]
  only_without_nvidia_driver: bool = False


def _known(level, source, message, **kwargs):
  return KnownLine(level.encode(), source.encode(), re.compile(message.encode()), **kwargs)


# What TensorFlow 2.20 still prints at TF_CPP_MIN_LOG_LEVEL=1 on a normal run of the commands.
KNOWN_LINES = (
    # The CUDA build probing for a GPU on a machine without an NVIDIA driver; with a driver, a
    # failed cuInit is a real error and shows.
    _known("E", "cuda_platform.cc", r"failed call to cuInit: ", only_without_nvidia_driver=True),
    # A dataset made by from_generator (Keras, our input pipelines) cannot be rewritten.
    _known("W", "dataset.cc", r"Input of GeneratorDatasetOp::Dataset will not be optimized "
           r"because the dataset does not implement the AsGraphDefInternal\(\) method needed "
           r"to apply optimizations\.$"),
    # absl's C++ INFO line of the first XLA-compiled kernel (model/fused.py).
    _known("I", "device_compiler.h", r"Compiled cluster using XLA!  This line is logged at "
           r"most once for the lifetime of the process\.$"),
    # oneDNN on a CPU without AVX-512: TensorFlow keeps its own kernel for int64 transposes.
    _known("E", "util.cc", r"oneDNN supports DT_INT64 only on platforms with AVX-512\. Falling "
           r"back to the default Eigen-based implementation if present\.$"),
)
# absl's C++ logging, printed once before its first line (which KNOWN_LINES handles).
KNOWN_PLAIN_LINES = (b"WARNING: All log messages before absl::InitializeLog() is called are "
                     b"written to STDERR",)


class LineFilter:
  """Decides line by line (bytes, without the newline) what reaches the user."""

  def __init__(self, nvidia_driver: Optional[bool] = None):
    self.nvidia_driver = (os.path.exists(NVIDIA_DRIVER) if nvidia_driver is None
                          else nvidia_driver)

  def keep(self, line: bytes) -> bool:
    bare = line.rstrip(b"\r")
    if bare in KNOWN_PLAIN_LINES:
      return False
    prefix = _PREFIX.match(bare)
    if prefix is None:
      return True
    level = prefix.group(1) or prefix.group(3)
    source = (prefix.group(2) or prefix.group(4)).rsplit(b"/", 1)[-1]
    message = bare[prefix.end():]
    return not any(
        known.level == level and known.source == source and known.message.match(message)
        and not (known.only_without_nvidia_driver and self.nvidia_driver)
        for known in KNOWN_LINES)


# === The filter process ===

PARTIAL_LINE_WAIT = 0.2  # seconds a line without its newline waits before it is printed as is


def _write_all(fd: int, data: bytes) -> bool:
  try:
    while data:
      data = data[os.write(fd, data):]
    return True
  except OSError:  # the reader is gone: keep draining, so that the command never blocks
    return False


def filter_stream(in_fd: int, out_fd: int, line_filter: Optional[LineFilter] = None) -> None:
  """Copies in_fd to out_fd without the lines line_filter drops, until end of file.

  A partial line is printed as it is when nothing follows it for PARTIAL_LINE_WAIT seconds (a
  prompt, or the last words of a process that died). Should filtering itself fail, the rest is
  copied unfiltered.
  """
  line_filter = line_filter or LineFilter()
  pending, writable = b"", True
  try:
    while True:
      if pending and not select.select([in_fd], [], [], PARTIAL_LINE_WAIT)[0]:
        writable = _write_all(out_fd, pending) and writable
        pending = b""
      data = os.read(in_fd, 65536)
      if not data:
        break
      lines = (pending + data).split(b"\n")
      pending = lines.pop()
      kept = b"".join(line + b"\n" for line in lines if line_filter.keep(line))
      if kept and writable:
        writable = _write_all(out_fd, kept)
    if pending and line_filter.keep(pending) and writable:
      _write_all(out_fd, pending)
  except Exception:  # pylint: disable=broad-except
    # Never lose a line to a bug in here: what is left goes through as it is.
    _write_all(out_fd, pending)
    while True:
      data = os.read(in_fd, 65536)
      if not data:
        break
      _write_all(out_fd, data)


def _filter_process_main() -> None:
  """The filter process: stdin is the command's stderr, stdout the terminal's (or the file's).

  It outlives nothing: it ends when every writer has closed the pipe (the command exited or
  died). Interrupts are the command's business: a Ctrl-C must not kill the filter first, or the
  command's last words would be lost.
  """
  for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGTSTP"):
    if hasattr(signal, name):
      signal.signal(getattr(signal, name), signal.SIG_IGN)
  filter_stream(0, 1)


# Should this module fail to import in the filter process, it copies everything unfiltered
# (a filter that died would cost the command its stderr).
_FILTER_CODE = """
import os, sys
try:
  sys.path.insert(0, sys.argv[1])
  from bert_tf import logs
except BaseException:
  logs = None
if logs is not None:
  logs._filter_process_main()
else:
  data = os.read(0, 65536)
  while data:
    os.write(1, data)
    data = os.read(0, 65536)
"""


class _StderrFilter:
  """Points file descriptor 2 at the filter process; restore() puts it back and waits."""

  def __init__(self):
    sys.stderr.flush()
    self.pid = os.getpid()
    self.saved = os.dup(2)
    read_end, write_end = os.pipe()
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
      self.process = subprocess.Popen(
          [sys.executable, "-S", "-c", _FILTER_CODE, package_root], stdin=read_end,
          stdout=self.saved, stderr=self.saved, close_fds=True, start_new_session=True)
    except BaseException:
      os.close(read_end)
      os.close(write_end)
      os.close(self.saved)
      raise
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)

  def restore(self, timeout: float = 3.0) -> None:
    """Back to the original stderr; the filter prints what it has and ends."""
    if os.getpid() != self.pid:  # a forked child exiting through atexit: not its filter
      return
    try:
      sys.stderr.flush()
    except (OSError, ValueError):
      pass
    os.dup2(self.saved, 2)
    os.close(self.saved)
    try:
      self.process.wait(timeout)
    except subprocess.TimeoutExpired:
      pass  # a child of the command still holds the pipe; the filter ends after it


_active_filter: Optional[_StderrFilter] = None


def filter_stderr() -> bool:
  """Routes this process's stderr (fd 2, C++ and Python alike) through the filter process until
  exit. False (and stderr unchanged) where that is not possible."""
  global _active_filter
  if _active_filter is not None:
    return True
  if os.name != "posix" or not sys.executable:
    return False
  try:
    _active_filter = _StderrFilter()
  except (OSError, ValueError, subprocess.SubprocessError):
    return False
  import atexit  # pylint: disable=g-import-not-at-top
  atexit.register(restore_stderr)
  return True


def restore_stderr() -> None:
  """Ends the filter (it prints what it holds) and puts stderr back; at exit, or before a
  process ends without exit handlers (os._exit)."""
  global _active_filter
  if _active_filter is not None:
    _active_filter.restore()
    _active_filter = None


# === Python logging ===


# TensorFlow logs through its own logger (`tensorflow`) and, in some modules, through absl's
# (`absl`), like bert_tf: its records are told apart by the file that logged them.
QUIET_PACKAGES = ("tensorflow", "keras", "tf_keras", "tensorflow_text", "tensorflow_hub")


class _DropPackageInfo(logging.Filter):
  """Drops INFO and DEBUG records logged from the files of QUIET_PACKAGES."""

  def __init__(self):
    super().__init__()
    self._directories = None
    self._verdicts = {}

  def _package_directories(self):
    import importlib.util  # pylint: disable=g-import-not-at-top
    directories = []
    for name in QUIET_PACKAGES:
      try:
        spec = importlib.util.find_spec(name)  # a top-level package: found, not imported
      except (ImportError, ValueError):
        continue
      for location in (spec and spec.submodule_search_locations) or ():
        directories.append(os.path.join(os.path.realpath(location), ""))
    return tuple(directories)

  def filter(self, record):
    if record.levelno >= logging.WARNING:
      return True
    path = record.pathname
    if path not in self._verdicts:
      if self._directories is None:
        self._directories = self._package_directories()
      self._verdicts[path] = not os.path.realpath(path).startswith(self._directories)
    return self._verdicts[path]


_DROP_PACKAGE_INFO = _DropPackageInfo()


# The original's verbose dumps, which the commands still log as the original did (every
# trainable variable, the first examples' tokens and ids, the input features) but show only when
# asked for everything: (source file under bert_tf/, message format) of each dump's lines, and
# of the line that starts each dump, which is shown once, as a pointer to the flag.
DUMP_STARTS = {
    ("training/loop.py", "**** Trainable Variables ****"): "the trainable variables",
    ("training/pretraining.py", "*** Features (per replica) ***"): "the input features",
    ("tasks/classifier/data.py", "*** Example %d ***"): "the first examples' tokens and ids",
    ("tasks/squad/data.py", "*** Example ***"): "the first windows' tokens and ids",
}
DUMP_LINES = frozenset([
    ("training/loop.py", "  name = %s, shape = %s%s"),
    ("training/pretraining.py", "  name = %s, shape = %s"),
    *(("tasks/classifier/data.py", f"{key}: %s") for key in (
        "guid", "tokens", "input_ids", "input_mask", "segment_ids")),
    ("tasks/classifier/data.py", "label: %s (id = %s)"),
    *(("tasks/squad/data.py", f"{key}: %s") for key in (
        "unique_id", "example_index", "doc_span_index", "tokens", "token_to_orig_map",
        "token_is_max_context", "input_ids", "input_mask", "segment_ids", "answer")),
    ("tasks/squad/data.py", "impossible example"),
    ("tasks/squad/data.py", "start_position: %d"),
    ("tasks/squad/data.py", "end_position: %d"),
])


def _package_path(path: str) -> str:
  """A source file's path under the bert_tf package ("tasks/squad/data.py"), "" elsewhere."""
  parts = path.replace(os.sep, "/").split("/")
  if "bert_tf" not in parts:
    return ""
  last = len(parts) - 1 - parts[::-1].index("bert_tf")
  return "/".join(parts[last + 1:])


class _HideDumps(logging.Filter):
  """Drops the lines of the original's dumps (DUMP_LINES), and shows the first line of each kind
  of dump (DUMP_STARTS) once, as one line saying what --verbosity=1 shows."""

  def __init__(self):
    super().__init__()
    self._said = set()

  def filter(self, record):
    if record.levelno != logging.INFO or not isinstance(record.msg, str):
      return True
    key = (_package_path(record.pathname), record.msg)
    if key in DUMP_LINES:
      return False
    what = DUMP_STARTS.get(key)
    if what is None:
      return True
    if key in self._said:
      return False
    self._said.add(key)
    record.msg, record.args = ("(%s, as the original logs them: --verbosity=1 or %s=1)",
                               (what, VERBOSE_ENV))
    return True


_HIDE_DUMPS = _HideDumps()


def hide_original_dumps() -> None:
  """The original's verbose dumps (DUMP_STARTS, DUMP_LINES) are left out of the log, each kind
  replaced by one line naming the flag that shows it."""
  logger = logging.getLogger("absl")
  if _HIDE_DUMPS not in logger.filters:
    logger.addFilter(_HIDE_DUMPS)


def quiet_tensorflow_python_logging() -> None:
  """The INFO records that TensorFlow's (and Keras') Python code logs, through its logger or
  absl's, are dropped; their warnings and errors pass, and so does everything of ours."""
  for name in ("tensorflow", "absl"):
    logger = logging.getLogger(name)
    if _DROP_PACKAGE_INFO not in logger.filters:
      logger.addFilter(_DROP_PACKAGE_INFO)


# === The commands' entry point ===


def verbose_requested(flag_values=None) -> bool:
  """BERT_TF_VERBOSE set (and not 0), or absl's --verbosity (-v) given at 1 or more."""
  value = os.environ.get(VERBOSE_ENV, "").strip().lower()
  if value not in ("", "0", "false", "no"):
    return True
  if flag_values is not None and "verbosity" in flag_values:
    flag = flag_values["verbosity"]
    return bool(flag.present) and flag.value is not None and flag.value >= 1
  return False


def quiet_by_default(flag_values=None) -> bool:
  """Hides TensorFlow's routine log lines for the rest of the process unless the user asked for
  everything (verbose_requested). Call before TensorFlow is imported. Returns whether it did."""
  if verbose_requested(flag_values):
    return False
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
  quiet_tensorflow_python_logging()
  hide_original_dumps()
  filter_stderr()
  return True
