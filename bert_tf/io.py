"""File helpers for local paths and every tf.io.gfile scheme (gs://, ram://, ...).

Local paths use Python's own file functions, so data preparation on a laptop never imports
TensorFlow (~0.7 GB and several seconds per worker); any path with a scheme goes through
tf.io.gfile, imported on first use.

Every file or directory the project writes goes through `atomic_write` or `atomic_path`: it is
written under a temporary name, `<path>.incomplete-<pid>`, and renamed to its final name only
when complete, so a killed or failed run never leaves a partial file under a final name. Local
temporaries of dead processes are removed by `remove_stale_temp_files` on the next run.
"""

import contextlib
import errno
import glob as glob_lib
import json
import os
import shutil
import socket
import threading
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from absl import logging

TEMP_MARKER = ".incomplete-"


def is_local(path: str) -> bool:
  """True for plain filesystem paths; False for gs://, ram:// and other tf.io.gfile schemes."""
  return "://" not in str(path)


def _gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile


def open_file(path: str, mode: str = "r"):
  """open() for local paths (UTF-8 text), tf.io.gfile.GFile for any other scheme."""
  if is_local(path):
    return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
  return _gfile().GFile(path, mode)


def as_tf_readline(line: str) -> Tuple[str, bool]:
  """A line as TensorFlow's readline (the original's tf.gfile reader) gives it, every "\\r"
  deleted, and whether a "\\r" sat inside its text (not only at its end, as in CRLF), which
  joins the text either side of it ("a\\rb" is the word "ab" there)."""
  if "\r" not in line:
    return line, False
  return line.replace("\r", ""), "\r" in line.rstrip("\r\n")


def read_text(path: str) -> str:
  with open_file(path, "r") as f:
    return f.read()


def read_json_object(path: str, consequence: str = "ignored") -> Optional[Dict[str, Any]]:
  """The JSON object in the file at `path`, or None for a file that may be absent: no file (or a
  folder) there, or JSON that is not an object. Invalid JSON also gives None, with the warning
  "<path> is not valid JSON; <consequence>"."""
  if not exists(path) or isdir(path):
    return None
  try:
    value = json.loads(read_text(path))
  except ValueError:
    logging.warning("%s is not valid JSON; %s", path, consequence)
    return None
  return value if isinstance(value, dict) else None


def join(directory: str, *names: str) -> str:
  """directory/name/... with "/" (every filesystem here, gs:// included); the names alone for
  a directory ""."""
  path = directory
  for name in names:
    path = f"{path.rstrip('/')}/{name}" if path else name
  return path


def dirname(path: str) -> str:
  """The folder of path (the part before the last "/"); "." for a bare name."""
  return path.rsplit("/", 1)[0] if "/" in path else "."


def exists(path: str) -> bool:
  return os.path.exists(path) if is_local(path) else _gfile().exists(path)


def isdir(path: str) -> bool:
  return os.path.isdir(path) if is_local(path) else _gfile().isdir(path)


def size(path: str) -> int:
  return os.path.getsize(path) if is_local(path) else _gfile().stat(path).length


def listdir(path: str) -> List[str]:
  """Entry names of a directory (no trailing slashes); [] when it does not exist."""
  if is_local(path):
    return os.listdir(path) if os.path.isdir(path) else []
  gfile = _gfile()
  return [n.rstrip("/") for n in gfile.listdir(path)] if gfile.isdir(path) else []


def glob(pattern: str) -> List[str]:
  """Sorted matches of a glob pattern."""
  if is_local(pattern):
    return sorted(glob_lib.glob(pattern))
  return sorted(_gfile().glob(pattern))


def makedirs(path: str) -> None:
  """Creates a folder and its parents; an existing file of that name is a NotADirectoryError."""
  if not path:
    return
  if is_local(path):
    if os.path.exists(path) and not os.path.isdir(path):
      raise NotADirectoryError(errno.ENOTDIR, "a file, not a folder", path)
    os.makedirs(path, exist_ok=True)
  else:
    _gfile().makedirs(path)


def check_writable(path: str) -> None:
  """Fails now, not after hours of work, when the file `path` cannot be written.

  Creates the folder and a probe file in it (removed at once). Other filesystems than local
  ones are left to the write itself.

  Raises:
    OSError: the folder cannot be created or written (read-only, a file in the way, no
      permission, no space for even an empty file), with `path` as its filename.
  """
  if not is_local(path):
    return
  if os.path.isdir(path):
    raise IsADirectoryError(errno.EISDIR, "a folder, not a file", path)
  directory = os.path.dirname(path) or "."
  makedirs(directory)
  probe = temp_name(os.path.join(directory, ".bert_tf-write-check"))
  try:
    with open(probe, "w"):
      pass
  except OSError as e:
    raise type(e)(e.errno, f"{e.strerror or e}: cannot write in {directory}", path) from None
  os.remove(probe)


def remove(path: str) -> None:
  """Removes a file, or a directory with everything in it."""
  if is_local(path):
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)
    return
  gfile = _gfile()
  if gfile.isdir(path):
    gfile.rmtree(path)
  else:
    gfile.remove(path)


def remove_if_exists(path: str) -> None:
  if exists(path):
    remove(path)


def rename(src: str, dst: str, overwrite: bool = True) -> None:
  """Renames src to dst (atomic for files on one local filesystem).

  With overwrite, an existing dst is replaced; when src is a directory an existing dst is
  removed first (directories cannot be replaced in one step).
  """
  if not overwrite and exists(dst):
    raise FileExistsError(f"{dst} already exists")
  if isdir(src) and exists(dst):
    remove(dst)
  if is_local(src) and is_local(dst):
    os.replace(src, dst)
  else:
    _gfile().rename(src, dst, overwrite=True)


def copy(src: str, dst: str, overwrite: bool = True) -> None:
  """Copies a file atomically (to a temporary name, then renamed)."""
  with atomic_path(dst, overwrite=overwrite) as tmp:
    if is_local(src) and is_local(tmp):
      shutil.copyfile(src, tmp)
    else:
      _gfile().copy(src, tmp, overwrite=True)


def temp_name(path: str, suffix: str = "") -> str:
  """The temporary name `path` is written under: `<path>.incomplete-<pid><suffix>`."""
  return f"{path}{TEMP_MARKER}{os.getpid()}{suffix}"


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = "", parts: Sequence[str] = ("",),
                overwrite: bool = True) -> Iterator[str]:
  """Yields a temporary path to write `path` at; renames it to `path` when the block succeeds.

  For writers that create the file or directory themselves (SavedModels, Keras archives,
  TensorFlow checkpoints). On an exception whatever was written under the temporary name is
  removed and `path` is left as it was.

  Args:
    path: the final file or directory.
    suffix: appended to the temporary name, for writers that insist on an extension (".keras").
    parts: for writers that add suffixes of their own: each `tmp + part` is renamed to
      `path + part` (a TF checkpoint: (".index", ".data-00000-of-00001")).
    overwrite: replace an existing `path`; False raises FileExistsError before writing.
  """
  if suffix and parts != ("",):
    raise ValueError("atomic_path: use either suffix or parts")
  if not overwrite and any(exists(path + part) for part in parts):
    raise FileExistsError(f"{path} already exists")
  tmp = temp_name(path, suffix)
  for part in parts:
    remove_if_exists(tmp + part)
  makedirs(os.path.dirname(path))
  try:
    yield tmp
    for part in parts:
      # Existence was checked above, before anything was written.
      rename(tmp + part, path + part, overwrite=True)
  except BaseException as e:
    for part in parts:
      try:
        remove_if_exists(tmp + part)
      except Exception:  # pylint: disable=broad-except
        pass  # already failing; the temporary's name says it is incomplete
    if isinstance(e, OSError) and e.errno and (not e.filename or
                                               str(e.filename).startswith(tmp)):
      # Say which output failed (a full disk's ENOSPC names no file), not its temporary name.
      raise type(e)(e.errno, e.strerror or str(e), path) from e
    raise


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", overwrite: bool = True):
  """Opens a temporary file for writing; it becomes `path` only when the block succeeds.

  Usage: `with io.atomic_write(path) as f: f.write(text)`.
  """
  with atomic_path(path, overwrite=overwrite) as tmp:
    with open_file(tmp, mode) as f:
      yield f


def write_text(path: str, text: str) -> None:
  """Writes a text file atomically."""
  with atomic_write(path) as f:
    f.write(text)


def write_bytes(path: str, data: bytes) -> None:
  """Writes a binary file atomically."""
  with atomic_write(path, "wb") as f:
    f.write(data)


def write_records(path: str, records: Sequence[bytes]) -> None:
  """Writes a TFRecord file of `records` atomically (imports TensorFlow)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with atomic_path(path) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for record in records:
        writer.write(record)


def remove_stale_temp_files(path: str) -> List[str]:
  """Deletes `<path>.incomplete-<pid>*` left by killed runs (local paths whose pid is gone).

  A temporary of a process that is still alive is left alone. Other filesystems cannot tell,
  so their leftovers stay (their names say they are incomplete).
  """
  if not is_local(path):
    return []
  removed = []
  for temp in glob_lib.glob(glob_lib.escape(path) + TEMP_MARKER + "*"):
    pid = temp[len(path) + len(TEMP_MARKER):].split(".", 1)[0]
    if not pid.isdigit():
      continue
    try:
      os.kill(int(pid), 0)
      continue  # alive (or not ours to signal): maybe another run writing right now
    except ProcessLookupError:
      pass
    except PermissionError:
      continue
    remove(temp)
    removed.append(temp)
  return removed


# === One writer per run directory ===

LOCK_NAME = ".bert_tf.lock"
# A lock of another host is taken over when its holder has not refreshed it for this long
# (seconds; BERT_TF_LOCK_STALE_SECONDS): a chief relaunched on a new machine, as Kubernetes and
# managed instance groups do after a preemption, resumes its run instead of being refused. The
# holder refreshes its lock every quarter of it.
DEFAULT_LOCK_STALE_SECONDS = 60.0


class DirectoryInUseError(OSError):
  """Another live process holds the lock of a run directory."""


def lock_stale_seconds() -> float:
  """BERT_TF_LOCK_STALE_SECONDS (a positive number), else DEFAULT_LOCK_STALE_SECONDS."""
  text = os.environ.get("BERT_TF_LOCK_STALE_SECONDS", "")
  try:
    value = float(text) if text else DEFAULT_LOCK_STALE_SECONDS
  except ValueError:
    value = 0.0
  if not value > 0:
    raise ValueError(f"BERT_TF_LOCK_STALE_SECONDS must be a positive number of seconds, got "
                     f"{text!r}")
  return value


def _lock_owner(text: str) -> Dict[str, Any]:
  try:
    owner = json.loads(text)
  except ValueError:
    return {}
  return owner if isinstance(owner, dict) else {}


def _describe_lock(text: str) -> str:
  owner = _lock_owner(text)
  if not owner:
    return "another run"
  return (f"{owner.get('program', 'a bert_tf run')} (pid {owner.get('pid')} on "
          f"{owner.get('host')}, since {owner.get('started')})")


def _heartbeat_age(owner: Mapping[str, Any]) -> Optional[float]:
  """Seconds since the holder last refreshed its lock (None: a lock without heartbeats)."""
  beat = owner.get("heartbeat")
  return time.time() - beat if isinstance(beat, (int, float)) else None


def _lock_is_stale(text: str, stale_seconds: float) -> bool:
  """True when the lock's owner is gone: a process of this host whose pid is gone, or a
  process of another host that has not refreshed the lock for stale_seconds."""
  owner = _lock_owner(text)
  if owner.get("host") != socket.gethostname():
    age = _heartbeat_age(owner)
    return age is not None and age > stale_seconds
  if not isinstance(owner.get("pid"), int):
    return False
  try:
    os.kill(owner["pid"], 0)
  except ProcessLookupError:
    return True
  except PermissionError:
    return False
  return False


def _wait_for_stale_lock(path: str, text: str, stale_seconds: float) -> str:
  """For another host's lock that is still refreshed: waits until it has gone unrefreshed for
  stale_seconds (its holder stopped) or until it has been refreshed for that long (its holder
  runs). Returns the lock's text at the end (unchanged when the holder stopped)."""
  owner = _lock_owner(text)
  if (owner.get("host") == socket.gethostname() or _heartbeat_age(owner) is None
      or _lock_is_stale(text, stale_seconds)):
    return text
  logging.warning("%s is locked by %s on another host, refreshed %.0f s ago: waiting up to "
                  "%.0f s for it to stop (a relaunched run takes over a lock left unrefreshed "
                  "that long)", dirname(path), _describe_lock(text), _heartbeat_age(owner),
                  stale_seconds)
  deadline = time.time() + stale_seconds + 1.0
  while time.time() < deadline:
    if _lock_is_stale(text, stale_seconds):
      return text
    time.sleep(min(1.0, stale_seconds / 8))
    if not exists(path):
      return ""  # released
    try:
      latest = read_text(path)
    except Exception:  # pylint: disable=broad-except
      continue  # replaced while read, a transient error of the filesystem: read it again
    if _lock_owner(latest):  # a record being rewritten reads as nothing: keep the last one
      text = latest
  return text


class _Heartbeat:
  """Refreshes a held lock file's heartbeat every interval seconds in a daemon thread, as long
  as the file still names this holder (a lock taken over while this process was frozen is
  left to its new holder, with an error logged)."""

  def __init__(self, path: str, record: Dict[str, Any], interval: float):
    self._path, self._record, self._interval = path, dict(record), interval
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, name="bert_tf lock heartbeat", daemon=True)
    self._thread.start()

  def _run(self):
    while not self._stop.wait(self._interval):
      try:
        owner = _lock_owner(read_text(self._path))
        if (owner.get("pid"), owner.get("host"), owner.get("started")) != (
            self._record["pid"], self._record["host"], self._record["started"]):
          logging.error("The lock %s was taken over by %s while this run held it", self._path,
                        _describe_lock(json.dumps(owner)))
          return
        self._record["heartbeat"] = time.time()
        write_text(self._path, json.dumps(self._record) + "\n")
      except (OSError, ValueError) as e:  # a transient filesystem error: try again next time
        logging.warning("Could not refresh the lock %s: %s", self._path, e)

  def stop(self):
    self._stop.set()
    self._thread.join()


@contextlib.contextmanager
def directory_lock(directory: str, program: str) -> Iterator[None]:
  """Holds `<directory>/.bert_tf.lock` for the block: one writer per run directory.

  The lock file records the program, pid, host, start time and a heartbeat: the holder
  rewrites it every quarter of lock_stale_seconds() (BERT_TF_LOCK_STALE_SECONDS, default
  60 s). A second run on the same directory fails with DirectoryInUseError naming the holder.
  A lock left by a killed process of this host (its pid is gone) is taken over at once with a
  warning; a lock of another host is taken over, with a warning, once its heartbeat is older
  than lock_stale_seconds() (a run relaunched on a new machine waits that long at most for the
  old holder's heartbeat to stop; a holder that keeps refreshing it refuses the newcomer). A
  lock without a heartbeat (older versions) of another host is never taken over: delete the file
  when that run is known to be gone. The same process may take a lock it already holds (a run
  that trains, then predicts). Locally the file is created atomically (O_EXCL); on other
  filesystems (gs://) existence is checked before writing, which stops a second run started
  after the first but not two started within the same moment.
  """
  stale_seconds = lock_stale_seconds()
  makedirs(directory)
  path = join(directory, LOCK_NAME)
  owner_record = dict(program=program, pid=os.getpid(), host=socket.gethostname(),
                      started=time.strftime("%Y-%m-%d %H:%M:%S"), heartbeat=time.time())
  record = json.dumps(owner_record) + "\n"
  held_here = acquired = False
  for _ in range(2):
    try:
      if is_local(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as f:
          f.write(record)
      else:
        if exists(path):
          raise FileExistsError(path)
        write_text(path, record)
      acquired = True
      break
    except FileExistsError:
      try:
        text = read_text(path)
      except (OSError, ValueError):
        text = ""
      owner = _lock_owner(text)
      if owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
        held_here = True
        break
      text = _wait_for_stale_lock(path, text, stale_seconds)
      if not _lock_is_stale(text, stale_seconds):
        if not text:
          continue  # released while we waited: try again
        raise DirectoryInUseError(
            f"{directory} is in use by {_describe_lock(text)}: one run per directory; wait "
            f"for it to finish or choose another directory (if that run is gone, delete "
            f"{path})") from None
      logging.warning("Taking over the lock of %s left by %s, which is no longer running",
                      directory, _describe_lock(text))
      remove_if_exists(path)
  if not (acquired or held_here):
    raise DirectoryInUseError(f"{directory}: could not take {path}; another run keeps "
                              "creating it")
  heartbeat = _Heartbeat(path, owner_record, stale_seconds / 4) if acquired else None
  try:
    yield
  finally:
    if heartbeat is not None:
      heartbeat.stop()
    if not held_here:
      try:
        remove_if_exists(path)
      except OSError:
        pass
