"""Serialised instances -> TFRecord files: round-robin, atomic, optionally GZIP, with statistics.

Local outputs are framed in Python (numpy CRC-32C), so data preparation on local files never
imports TensorFlow (~0.7 GB and several seconds); other tf.io.gfile paths use tf.io.TFRecordWriter.
Each output is written under a temporary name (`<file>.incomplete-<pid>`) and renamed only when
every record is in, so a killed run leaves nothing that looks like finished data; the next run
deletes such leftovers once their process is gone. Existing non-empty outputs (and, for an
output folder, shards of another layout) are refused unless the caller asks to overwrite them.

Committing several files (records, then their metadata) cannot be one atomic step, so
`RecordWriter.commit` keeps a journal: every record and metadata file is first complete under
its temporary name (a full disk fails here, before anything final is touched); then a journal
`<first output>.incomplete-<pid>.commit` lists the final files and their sizes; then stale
metadata goes, the records are renamed and the metadata files last (a record file never has
metadata that does not describe it); then the journal is deleted. Whatever the journal names is
an unfinished commit: `recover_interrupted_commits`, called by the next run on the same
outputs before its checks, deletes the files the journal names (those still of the recorded
size, so a later run's outputs are never taken for them), and that run starts from a clean
slate: no `--overwrite` is needed for outputs that only a killed run had made. A commit that
fails inside a live process (an I/O error, Ctrl-C) rolls itself back the same way.
"""
import dataclasses
import gzip
import json
import os
import posixpath
import re
import socket
import struct
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from bert_tf import io
from bert_tf import record_schema

COMPRESSION_TYPES = ("", "GZIP")


class OutputError(ValueError):
  """An output that cannot or must not be written; the message names the file."""


# === Statistics ===


@dataclasses.dataclass
class InstanceStats:
  """Running totals over written instances, for the summary the command prints."""

  max_seq_length: int
  instances: int = 0
  tokens: int = 0
  full_length: int = 0
  masked: int = 0
  random_next: int = 0

  def add(self, instance) -> None:
    """Counts one `instances.TrainingInstance`."""
    num_tokens = len(instance.input_ids)
    self.instances += 1
    self.tokens += num_tokens
    self.full_length += num_tokens == self.max_seq_length
    self.masked += len(instance.masked_lm_positions)
    self.random_next += bool(instance.is_random_next)

  def merge(self, other: "InstanceStats") -> None:
    for field in ("instances", "tokens", "full_length", "masked", "random_next"):
      setattr(self, field, getattr(self, field) + getattr(other, field))

  def summary(self) -> Dict[str, float]:
    n = max(self.instances, 1)
    return {
        "instances": self.instances,
        "mean_length": self.tokens / n,
        "full_length_fraction": self.full_length / n,
        "mean_masked_tokens": self.masked / n,
        "random_next_fraction": self.random_next / n,
        "masked_tokens": self.masked,
    }


class Serializer:
  """Instance -> record bytes, counting statistics on the way (a `transform` for instances.py)."""

  def __init__(self, encoder: record_schema.ExampleEncoder):
    self.encoder = encoder
    self.stats = InstanceStats(encoder.max_seq_length)

  def __call__(self, instance) -> bytes:
    self.stats.add(instance)
    return self.encoder.encode(*instance)


# === TFRecord framing without TensorFlow ===
#
# A TFRecord is: uint64 length (little-endian), masked crc32c of those 8 bytes, the data, masked
# crc32c of the data. TensorFlow is the only crc32c implementation in our environment, so local
# files use this numpy one (vectorised across a batch of records, one byte column at a time)
# and never import TensorFlow; tests check the bytes against tf.io.TFRecordWriter's.


def _crc32c_table():
  table = np.zeros(256, np.uint32)
  for i in range(256):
    c = i
    for _ in range(8):
      c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli polynomial, reflected
    table[i] = c
  return table


_CRC32C_TABLE = _crc32c_table()
_CRC32C_LIST = _CRC32C_TABLE.tolist()


def _masked_crc_of_header(data: bytes) -> bytes:
  """TFRecord's masked CRC-32C of a few bytes (a length header), in plain Python.

  Per record, so a damaged length is caught before its body is read; for 8 bytes this is a few
  microseconds, much less than numpy's per-call overhead.
  """
  crc = 0xFFFFFFFF
  table = _CRC32C_LIST
  for byte in data:
    crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  crc ^= 0xFFFFFFFF
  masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
  return struct.pack("<I", masked)


def crc32c_many(buffers: Sequence[bytes]) -> np.ndarray:
  """CRC-32C of each buffer (uint32 array), all buffers advancing together.

  Buffers are right-aligned in a byte matrix; a lane ignores the columns before its start.
  """
  n = len(buffers)
  if n == 0:
    return np.zeros(0, np.uint32)
  lengths = np.fromiter(map(len, buffers), np.int64, n)
  width = int(lengths.max())
  matrix = np.zeros((n, width), np.uint8)
  for row, data in enumerate(buffers):
    if data:
      matrix[row, width - len(data):] = np.frombuffer(data, np.uint8)
  columns = np.ascontiguousarray(matrix.T).astype(np.uint32)
  starts = width - lengths
  table = _CRC32C_TABLE
  crc = np.full(n, 0xFFFFFFFF, np.uint32)
  all_started = int(starts.max())
  for c in range(all_started):
    updated = table[(crc ^ columns[c]) & 0xFF] ^ (crc >> 8)
    crc = np.where(starts <= c, updated, crc)
  index = np.empty(n, np.uint32)
  for c in range(all_started, width):
    np.bitwise_xor(crc, columns[c], out=index)
    np.bitwise_and(index, 0xFF, out=index)
    np.right_shift(crc, 8, out=crc)
    np.bitwise_xor(crc, table.take(index), out=crc)
  return crc ^ np.uint32(0xFFFFFFFF)


def _masked(crc: np.ndarray) -> bytes:
  """TFRecord's masked CRCs, as consecutive little-endian uint32 bytes."""
  crc = crc.astype(np.uint32)
  rotated = (crc >> np.uint32(15)) | (crc << np.uint32(17))
  return (rotated + np.uint32(0xA282EAD8)).astype("<u4").tobytes()


def frame_records(records: Sequence[bytes]) -> bytes:
  """The TFRecord file bytes of `records`."""
  headers = [struct.pack("<Q", len(r)) for r in records]
  header_crcs = _masked(crc32c_many(headers))
  data_crcs = _masked(crc32c_many(records))
  parts = []
  for i, (header, record) in enumerate(zip(headers, records)):
    parts += (header, header_crcs[4 * i:4 * i + 4], record, data_crcs[4 * i:4 * i + 4])
  return b"".join(parts)


class CorruptRecordError(ValueError):
  """A TFRecord file whose framing or checksums are wrong; names the file, record and offset."""


def iter_records(path: str, compression: str = "", verify: bool = True,
                 batch: int = 4096):
  """Yields the records of a TFRecord file, checking both CRCs of each (in batches).

  With verify, each length header's CRC is checked before the body is read: a damaged length
  is reported as such (not as a truncated record or a huge allocation). A damaged header of
  the very first record is reported as "not a TFRecord file": that is what it usually means
  (callers such as records.py then tell which kind of file it is).

  Raises:
    CorruptRecordError: a truncated record or a checksum mismatch, naming the record's index
      and byte offset (in the uncompressed stream).
  """
  raw = io.open_file(path, "rb")
  stream = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "GZIP" else raw
  index = 0
  offset = 0
  try:
    while True:
      records, data_crcs, offsets = [], [], []
      error = None
      while len(records) < batch:
        where = f"{path}: record {index + len(records)} at byte {offset}"
        try:
          head = stream.read(12)
          if not head:
            break
          if len(head) < 12:
            error = f"{where}: truncated length header"
            break
          if verify and _masked_crc_of_header(head[:8]) != head[8:]:
            error = (f"{where}: length checksum mismatch" if offset else
                     f"{where}: not a TFRecord file (the first length header's checksum "
                     f"does not match)")
            break
          (length,) = struct.unpack("<Q", head[:8])
          body = stream.read(length + 4)
        except (OSError, EOFError, MemoryError, OverflowError) as e:  # damaged GZIP, huge length
          error = f"{where}: {e}"
          break
        if len(body) < length + 4:
          error = f"{where}: truncated record ({len(body)} of {length + 4} bytes)"
          break
        records.append(body[:length])
        data_crcs.append(body[length:])
        offsets.append(offset)
        offset += 12 + length + 4
      if verify and records:
        # Yield everything before the first bad checksum, then stop there (the length headers
        # were checked as they were read).
        data_ok = _masked(crc32c_many(records))
        for i in range(len(records)):
          if data_ok[4 * i:4 * i + 4] != data_crcs[i]:
            records = records[:i]
            error = f"{path}: record {index + i} at byte {offsets[i]}: data checksum mismatch"
            break
      yield from records
      index += len(records)
      if error:
        raise CorruptRecordError(error)
      if not records:
        return
  finally:
    stream.close()
    raw.close()


def count_records(path: str, compression: str = "") -> int:
  """How many records a TFRecord file holds, reading only the length headers.

  Uncompressed files are not read past the headers (each body is skipped with a seek); GZIP
  streams are decompressed (a seek there reads). Checksums are not verified.

  Raises:
    CorruptRecordError: a truncated header or record, naming the file and record.
  """
  count = offset = 0
  file_size = io.size(path) if compression != "GZIP" else 0
  raw = io.open_file(path, "rb")
  stream = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "GZIP" else raw
  try:
    while True:
      head = stream.read(12)
      if not head:
        return count
      if len(head) < 12:
        raise CorruptRecordError(f"{path}: record {count} at byte {offset}: truncated length "
                                 f"header")
      (length,) = struct.unpack("<Q", head[:8])
      if compression == "GZIP":
        skipped = len(stream.read(length + 4))
      else:
        skipped = min(length + 4, file_size - (offset + 12))
        stream.seek(offset + 12 + length + 4)
      if skipped < length + 4:
        raise CorruptRecordError(f"{path}: record {count} at byte {offset}: truncated record")
      count += 1
      offset += 12 + length + 4
  finally:
    stream.close()
    raw.close()


class _LocalRecordFile:
  """A TFRecord file on the local filesystem, framed in batches of records."""

  _BATCH = 4096

  def __init__(self, path: str, compression: str):
    self._file = open(path, "wb")
    # mtime=0 and no file name keep GZIP output byte-stable too.
    self._out = (gzip.GzipFile(filename="", mode="wb", fileobj=self._file, mtime=0)
                 if compression == "GZIP" else self._file)
    self._pending = []

  def write(self, record: bytes) -> None:
    self._pending.append(record)
    if len(self._pending) >= self._BATCH:
      self._flush()

  def _flush(self) -> None:
    if self._pending:
      self._out.write(frame_records(self._pending))
      self._pending = []

  def close(self) -> None:
    if self._file.closed:
      return
    try:
      self._flush()
    finally:
      if self._out is not self._file:
        self._out.close()
      self._file.close()


# === Files ===










SHARD_PATTERN = re.compile(r"pretraining-\d{5,}-of-\d{5,}\.tfrecord(\.gz)?$")


def shard_paths(output_dir: str, num_shards: int, compression: str = "") -> List[str]:
  """`<output_dir>/pretraining-00000-of-00008.tfrecord` (`.tfrecord.gz` with GZIP), ...

  Raises:
    OutputError: num_shards below 1 or an empty output_dir.
  """
  if not output_dir:
    raise OutputError("--output_dir: no folder given")
  if not isinstance(num_shards, int) or num_shards < 1:
    raise OutputError(f"--num_output_shards must be a positive integer, got {num_shards}")
  suffix = ".tfrecord.gz" if compression == "GZIP" else ".tfrecord"
  return [io.join(output_dir, f"pretraining-{i:05d}-of-{num_shards:05d}{suffix}")
          for i in range(num_shards)]




def foreign_shards(output_dir: str, shard_files: Sequence[str]) -> List[str]:
  """Shard files (and their metadata) in output_dir that are not among shard_files.

  A previous run with another --num_output_shards or compression leaves such files; a reader
  globbing `pretraining-*` would mix them with the new ones.
  """
  ours = {os.path.basename(p) for p in shard_files}
  found = []
  for name in sorted(io.listdir(output_dir)):
    base = name[:-len(record_schema.METADATA_SUFFIX)] if name.endswith(
        record_schema.METADATA_SUFFIX) else name
    if SHARD_PATTERN.match(base) and base not in ours:
      found.append(io.join(output_dir, name))
  return found


def check_output_dir(output_dir: str, shard_files: Sequence[str], overwrite: bool) -> List[str]:
  """Refuses a folder holding shards of another layout unless overwrite; returns those files.

  The caller removes the returned files when it commits (not before: a failed run must leave
  the previous data as it was).
  """
  if io.exists(output_dir) and not io.isdir(output_dir):
    raise OutputError(f"--output_dir: {output_dir} exists and is not a folder")
  stale = foreign_shards(output_dir, shard_files)
  if stale and not overwrite:
    raise OutputError(
        f"--output_dir: {output_dir} already holds shards of another run "
        f"({os.path.basename(stale[0])}{' and more' if len(stale) > 1 else ''}); pass "
        f"--overwrite to replace them")
  return stale




def _same_file_key(path: str) -> str:
  """What two spellings of one output have in common (realpath locally, normpath elsewhere)."""
  if io.is_local(path):
    return os.path.realpath(path)
  scheme, rest = path.split("://", 1)
  return f"{scheme}://{posixpath.normpath(rest)}"


def check_distinct_outputs(output_files: Sequence[str], flag: str = "--output_file",
                           input_files: Sequence[str] = ()) -> None:
  """Refuses two outputs that are one file, an output that is another output's metadata, and
  an output (or its metadata) that is one of the input files.

  Two spellings of one path (`a.tfrecord,./a.tfrecord`, a symlink) would share a temporary
  file and leave a corrupt record file under its final name; `<out>.metadata.json` as an output
  would be replaced by JSON; an input named as the output would be replaced by records.

  Raises:
    OutputError: naming both files.
  """
  inputs = {_same_file_key(path): path for path in input_files}
  for path in output_files:
    for written in (path, record_schema.metadata_path(path)):
      replaced = inputs.get(_same_file_key(written))
      if replaced is not None:
        raise OutputError(f"{flag}: {written} is the input file {replaced} (--input_file); "
                          "writing it would replace the text; choose another name")
  seen = {}
  for path in output_files:
    key = _same_file_key(path)
    if key in seen:
      first = seen[key]
      raise OutputError(f"{flag}: {path} is listed twice" if first == path else
                        f"{flag}: {first} and {path} are the same file (listed twice)")
    seen[key] = path
  for path in output_files:
    other = seen.get(_same_file_key(record_schema.metadata_path(path)))
    if other is not None:
      raise OutputError(f"{flag}: {other} is the metadata file of {path} "
                        f"({record_schema.metadata_path(path)}); choose another name")


def check_outputs(output_files: Sequence[str], overwrite: bool,
                  flag: str = "--output_file") -> None:
  """Refuses duplicate outputs and existing non-empty ones (unless overwrite); makes folders."""
  if not output_files:
    raise OutputError(f"{flag}: no output file given")
  check_distinct_outputs(output_files, flag)
  for path in output_files:
    if io.exists(path):
      if io.isdir(path):
        raise OutputError(f"{flag}: {path} is a directory")
      if io.size(path) > 0 and not overwrite:
        raise OutputError(f"{flag}: {path} already exists and is not empty; pass "
                          f"--overwrite to replace it")
    io.remove_stale_temp_files(path)
    parent = os.path.dirname(path)
    if parent and not io.exists(parent):
      try:
        io.makedirs(parent)
      except Exception as e:  # pylint: disable=broad-except
        # OSError locally, tf.errors.OpError on other filesystems.
        raise OutputError(f"{flag}: cannot create the folder of {path}: {e}") from None


# === The commit journal ===

JOURNAL_SUFFIX = ".commit"
JOURNAL_FORMAT = "bert_tf.commit_journal/1"
_JOURNAL_NAME = re.compile(re.escape(io.TEMP_MARKER) + r"(\d+)" + re.escape(JOURNAL_SUFFIX) + "$")
# Journals of commits running in this process (a journal with our pid that is not here was left
# by an earlier, failed commit of this process, or by a dead process whose pid we now have).
_ACTIVE_JOURNALS: Set[str] = set()


def journal_path(first_output: str) -> str:
  """`<first output>.incomplete-<pid>.commit`: a temporary's name, never taken for data."""
  return io.temp_name(first_output, JOURNAL_SUFFIX)


def _reason(error: BaseException) -> str:
  return str(getattr(error, "message", None) or error)


def _writer_alive(journal: str, pid: int, host: Optional[str]) -> Optional[bool]:
  """Whether the run that wrote `journal` still runs: True, False, or None (cannot tell)."""
  if host is None and io.is_local(journal):
    host = socket.gethostname()
  if host != socket.gethostname():
    return None
  if pid == os.getpid():
    return journal in _ACTIVE_JOURNALS
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # someone else's live process
  return True


def _remove_file_if_exists(path: str) -> None:
  # Never a folder: on ram:// the prefix of an existing name (`x` of `x.incomplete-1`) is one.
  if io.exists(path) and not io.isdir(path):
    io.remove(path)


def _rollback(journal: str, entries: Optional[Mapping[str, Any]]) -> List[str]:
  """Deletes what an unfinished commit made (files still of the recorded size); returns them.

  Temporaries are deleted whatever their size; a final file of another size was written by
  someone else since, and is left alone.
  """
  removed = []
  if entries:
    for path in entries.get("temps", []):
      if io.exists(path):
        io.remove(path)
        removed.append(path)
    for path, size in entries.get("outputs", []):
      if io.exists(path) and not io.isdir(path) and io.size(path) == size:
        io.remove(path)
        removed.append(path)
  io.remove_if_exists(journal)
  return removed


def _concerns(journal: str, entries: Optional[Mapping[str, Any]], ours: Set[str],
              output_dir_key: Optional[str]) -> bool:
  """Whether a journal found beside our outputs is about any of them."""
  base = journal[:_JOURNAL_NAME.search(journal).start()]
  if _same_file_key(base) in ours:
    return True
  if output_dir_key is not None and _same_file_key(os.path.dirname(base)) == output_dir_key \
      and SHARD_PATTERN.match(os.path.basename(base)):
    return True
  if entries:
    for path, _ in entries.get("outputs", []):
      if _same_file_key(path) in ours:
        return True
  return False


def recover_interrupted_commits(output_files: Sequence[str], output_dir: str = "",
                                overwrite: bool = False,
                                flag: str = "--output_file") -> List[Tuple[str, List[str]]]:
  """Rolls back unfinished commits of runs that died while committing to these outputs.

  Looks for commit journals beside every output (and, with an output folder, for any shard
  journal in it), so the rerun of a killed run finds that run's journal. A journal of a process
  that still runs on this machine is left alone and refused; one written on another machine
  (other filesystems) is only rolled back with overwrite.

  Returns:
    (journal, files deleted) for each rolled-back commit.

  Raises:
    OutputError: a commit that may still be in progress.
  """
  ours = {_same_file_key(p) for p in output_files}
  output_dir_key = _same_file_key(output_dir) if output_dir else None
  folders = sorted({os.path.dirname(p) for p in output_files} | ({output_dir} if output_dir
                                                                 else set()))
  recovered = []
  for folder in folders:
    for name in sorted(io.listdir(folder or ".")):
      match = _JOURNAL_NAME.search(name)
      if not match:
        continue
      journal = io.join(folder, name)
      try:
        entries = json.loads(io.read_text(journal))
        if not isinstance(entries, dict) or entries.get("format") != JOURNAL_FORMAT:
          raise ValueError("not a journal")
      except Exception:  # pylint: disable=broad-except
        entries = None  # cut short by a kill while written: nothing had been touched yet
      if not _concerns(journal, entries, ours, output_dir_key):
        continue
      pid = int(entries["pid"]) if entries else int(match.group(1))
      host = entries.get("host") if entries else None
      alive = _writer_alive(journal, pid, host)
      if alive:
        raise OutputError(f"{flag}: {journal}: run {pid} is committing to these outputs right "
                          f"now; wait for it to finish")
      if alive is None and not overwrite:
        raise OutputError(f"{flag}: {journal}: an unfinished commit of run {pid} on "
                          f"{host or 'another machine'}; if that run is gone, pass --overwrite "
                          f"to roll it back")
      recovered.append((journal, _rollback(journal, entries)))
  return recovered


class RecordWriter:
  """Writes records round-robin over several files, like the original, atomically.

  Use as a context manager: `commit()` renames every temporary file to its final name (with a
  journal, see the module docstring); on an exception the temporary files are deleted. Local
  paths are written without TensorFlow; other tf.io.gfile paths (gs://, ram://, ...) with
  tf.io.TFRecordWriter.

  Args:
    output_files: final paths.
    compression: "" or "GZIP".
    flag: the flag that named the outputs, for messages.
  """

  def __init__(self, output_files: Sequence[str], compression: str = "",
               flag: str = "--output_file"):
    if compression not in COMPRESSION_TYPES:
      raise OutputError(f"--compression must be one of {COMPRESSION_TYPES}, got {compression!r}")
    self.output_files = list(output_files)
    self.flag = flag
    self.temp_files = [io.temp_name(path) for path in self.output_files]
    self.counts = [0] * len(self.output_files)
    self._next = 0
    self._writers = []
    try:
      for temp in self.temp_files:
        self._writers.append(self._open(temp, compression))
    except Exception as e:  # pylint: disable=broad-except
      self.abort()
      raise OutputError(f"{flag}: cannot write {_reason(e)}") from None

  @classmethod
  def of_written_files(cls, output_files: Sequence[str], temp_files: Sequence[str],
                       counts: Sequence[int], flag: str = "--output_file") -> "RecordWriter":
    """A writer whose record files were written by someone else (the Beam pipeline's sink).

    temp_files[i] holds output_files[i]'s records (counts[i] of them) under a temporary name;
    commit() and abort() then work as for files written here.
    """
    if not len(output_files) == len(temp_files) == len(counts):
      raise ValueError("of_written_files: one temporary file and one count per output")
    writer = cls.__new__(cls)
    writer.output_files = list(output_files)
    writer.flag = flag
    writer.temp_files = list(temp_files)
    writer.counts = list(counts)
    writer._next = 0
    writer._writers = []
    return writer

  @staticmethod
  def _open(path: str, compression: str):
    if io.is_local(path):
      return _LocalRecordFile(path, compression)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(compression_type=compression))

  def _write_error(self, index: int, error: Exception) -> OutputError:
    return OutputError(f"{self.flag}: cannot write {self.output_files[index]}: {_reason(error)}")

  def write(self, record: bytes) -> None:
    try:
      self._writers[self._next].write(record)
    except Exception as e:  # pylint: disable=broad-except
      # OSError (a full disk) locally, tf.errors.OpError elsewhere: name the output.
      raise self._write_error(self._next, e) from None
    self.counts[self._next] += 1
    self._next = (self._next + 1) % len(self._writers)

  def finish_writing(self) -> None:
    """Flushes and closes the temporary files (still under their temporary names)."""
    writers, self._writers = self._writers, []
    for index, writer in enumerate(writers):
      try:
        writer.close()
      except Exception as e:  # pylint: disable=broad-except
        self._writers = writers[index + 1:]  # abort() closes the rest
        raise self._write_error(index, e) from None

  def _write_metadata_temp(self, final: str, text: str) -> str:
    meta_final = record_schema.metadata_path(final)
    meta_temp = io.temp_name(meta_final)
    self.temp_files.append(meta_temp)  # abort() deletes it
    try:
      with io.open_file(meta_temp, "w") as f:
        f.write(text)
    except Exception as e:  # pylint: disable=broad-except
      raise OutputError(f"{self.flag}: cannot write {meta_final}: {_reason(e)} (nothing was "
                        f"committed; the previous outputs are as they were)") from None
    return meta_temp

  def commit(self, final_files: Optional[Sequence[Optional[str]]] = None,
             metadata: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
             remove: Sequence[str] = ()) -> List[int]:
    """Renames the temporary files to their final names, with a journal; returns final sizes.

    Args:
      final_files: for each output, its final path (another layout's name, say), or None to
        drop it (its temporary file is deleted). Default: output_files.
      metadata: for each output, the metadata to write beside its final path
        (`record_schema.metadata_path`), or None. Default: none.
      remove: files to delete as part of the commit (shards of another layout, outputs that
        are not written). Stale metadata of the outputs is always removed.

    Returns:
      The size in bytes of each committed record file, in order.

    Raises:
      OutputError: a file could not be written or renamed, naming it; nothing final was
        touched if the error came while writing, and the commit was rolled back otherwise.
    """
    self.finish_writing()
    finals = list(self.output_files if final_files is None else final_files)
    metas = list(metadata if metadata is not None else [None] * len(finals))
    if not len(finals) == len(metas) == len(self.output_files):
      raise ValueError("commit: one final name and one metadata entry per output")
    records, meta_files = [], []  # (temp, final)
    for temp, final, meta in zip(list(self.temp_files), finals, metas):
      if final is None:
        _remove_file_if_exists(temp)
        continue
      records.append((temp, final))
      if meta is not None:
        text = json.dumps(meta, indent=2, sort_keys=False) + "\n"  # as record_schema.write_metadata
        meta_files.append((self._write_metadata_temp(final, text),
                           record_schema.metadata_path(final)))
    moves = records + meta_files
    stale = [record_schema.metadata_path(p) for p in self.output_files]
    stale += [record_schema.metadata_path(final) for _, final in records]
    stale = list(dict.fromkeys(list(remove) + stale))

    journal = journal_path(self.output_files[0])
    entries = {"format": JOURNAL_FORMAT, "pid": os.getpid(), "host": socket.gethostname(),
               "outputs": [[final, io.size(temp)] for temp, final in moves],
               "temps": [temp for temp, _ in moves]}
    try:
      with io.open_file(journal, "w") as f:
        f.write(json.dumps(entries, indent=1) + "\n")
    except Exception as e:  # pylint: disable=broad-except
      try:
        io.remove_if_exists(journal)
      except Exception:  # pylint: disable=broad-except
        pass  # unreadable or partial: the next run deletes it (nothing had been touched)
      raise OutputError(f"{self.flag}: cannot write {journal}: {_reason(e)} (nothing was "
                        f"committed; the previous outputs are as they were)") from None
    # From here on the previous outputs are given up; the journal names the new ones.
    _ACTIVE_JOURNALS.add(journal)
    try:
      for path in stale:
        _remove_file_if_exists(path)
      for temp, final in moves:  # records first, metadata last
        io.rename(temp, final)
      sizes = [io.size(final) for _, final in records]
      io.remove(journal)
    except BaseException as e:  # an I/O error, or Ctrl-C: undo what this commit did
      try:
        _rollback(journal, entries)
      except Exception:  # pylint: disable=broad-except
        pass  # the journal stays: the next run on these outputs rolls back
      if not isinstance(e, Exception):
        raise
      raise OutputError(f"{self.flag}: committing {records[0][1]}"
                        f"{f' and {len(records) - 1} more' if len(records) > 1 else ''} failed: "
                        f"{_reason(e)}; rolled back (outputs of these names from earlier runs are "
                        f"gone or without metadata): run again") from None
    finally:
      _ACTIVE_JOURNALS.discard(journal)
    self.temp_files = []
    return sizes

  def abort(self) -> None:
    """Closes and deletes whatever temporary files exist."""
    for writer in self._writers:
      try:
        writer.close()
      except Exception:  # pylint: disable=broad-except
        pass  # already failing; the temporary file is removed below
    self._writers = []
    for temp in self.temp_files:
      try:
        io.remove_if_exists(temp)
      except Exception:  # pylint: disable=broad-except
        pass  # its name says it is incomplete; the next run removes it
    self.temp_files = []

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc, tb):
    if exc_type is not None:
      self.abort()
    return False


def read_records(path: str, compression: Optional[str] = None) -> List[bytes]:
  """All records of one TFRecord file (compression from the metadata file if None)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  if compression is None:
    compression = ""
    meta_path = record_schema.metadata_path(path)
    if io.exists(meta_path):
      compression = record_schema.read_metadata(meta_path).get("compression", "")
  dataset = tf.data.TFRecordDataset(path, compression_type=compression)
  return [bytes(r) for r in dataset.as_numpy_iterator()]
