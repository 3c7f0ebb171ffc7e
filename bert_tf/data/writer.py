"""Serialised instances -> TFRecord files: round-robin, atomic, optionally GZIP, with statistics.

Local outputs are framed in Python (numpy CRC-32C), so data preparation on local files never
imports TensorFlow (~0.7 GB and several seconds); other tf.io.gfile paths use tf.io.TFRecordWriter.
Each output is written under a temporary name (`<file>.incomplete-<pid>`) and renamed only when
every record is in, so a killed run leaves nothing that looks like finished data; the next run
deletes such leftovers once their process is gone. Existing non-empty outputs (and, for an
output folder, shards of another layout) are refused unless the caller asks to overwrite them.
"""

import dataclasses
import gzip
import os
import re
import struct
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_tf import features
from bert_tf import io

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

  def __init__(self, encoder: features.ExampleEncoder):
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
      headers, header_crcs, records, data_crcs, offsets = [], [], [], [], []
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
          (length,) = struct.unpack("<Q", head[:8])
          body = stream.read(length + 4)
        except (OSError, EOFError, MemoryError, OverflowError) as e:  # damaged GZIP, huge length
          error = f"{where}: {e}"
          break
        if len(body) < length + 4:
          error = f"{where}: truncated record ({len(body)} of {length + 4} bytes)"
          break
        headers.append(head[:8])
        header_crcs.append(head[8:])
        records.append(body[:length])
        data_crcs.append(body[length:])
        offsets.append(offset)
        offset += 12 + length + 4
      if verify and records:
        # Yield everything before the first bad checksum, then stop there.
        header_ok = _masked(crc32c_many(headers))
        data_ok = _masked(crc32c_many(records))
        for i in range(len(records)):
          kind = ("length" if header_ok[4 * i:4 * i + 4] != header_crcs[i] else
                  "data" if data_ok[4 * i:4 * i + 4] != data_crcs[i] else None)
          if kind:
            records = records[:i]
            error = f"{path}: record {index + i} at byte {offsets[i]}: {kind} checksum mismatch"
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
    base = name[:-len(features.METADATA_SUFFIX)] if name.endswith(
        features.METADATA_SUFFIX) else name
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




def check_outputs(output_files: Sequence[str], overwrite: bool,
                  flag: str = "--output_file") -> None:
  """Refuses duplicate outputs and existing non-empty ones (unless overwrite); makes folders."""
  if not output_files:
    raise OutputError(f"{flag}: no output file given")
  seen = set()
  for path in output_files:
    if path in seen:
      raise OutputError(f"{flag}: {path} is listed twice")
    seen.add(path)
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




class RecordWriter:
  """Writes records round-robin over several files, like the original, atomically.

  Use as a context manager: `commit()` renames every temporary file to its final name; on an
  exception the temporary files are deleted. Local paths are written without TensorFlow;
  other tf.io.gfile paths (gs://, ram://, ...) with tf.io.TFRecordWriter.

  Args:
    output_files: final paths.
    compression: "" or "GZIP".
  """

  def __init__(self, output_files: Sequence[str], compression: str = ""):
    if compression not in COMPRESSION_TYPES:
      raise OutputError(f"--compression must be one of {COMPRESSION_TYPES}, got {compression!r}")
    self.output_files = list(output_files)
    self.temp_files = [io.temp_name(path) for path in self.output_files]
    self.counts = [0] * len(self.output_files)
    self._next = 0
    self._writers = []
    try:
      for temp in self.temp_files:
        self._writers.append(self._open(temp, compression))
    except Exception as e:  # pylint: disable=broad-except
      self.abort()
      raise OutputError(f"--output_file: cannot write {getattr(e, 'message', e)}") from None

  @staticmethod
  def _open(path: str, compression: str):
    if io.is_local(path):
      return _LocalRecordFile(path, compression)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(compression_type=compression))

  def write(self, record: bytes) -> None:
    self._writers[self._next].write(record)
    self.counts[self._next] += 1
    self._next = (self._next + 1) % len(self._writers)

  def finish_writing(self) -> None:
    """Flushes and closes the temporary files (still under their temporary names)."""
    for writer in self._writers:
      writer.close()
    self._writers = []

  def commit(self) -> List[int]:
    """Renames every temporary file to its final name; returns the final sizes in bytes."""
    self.finish_writing()
    sizes = []
    for temp, path in zip(self.temp_files, self.output_files):
      io.rename(temp, path)
      sizes.append(io.size(path))
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
      if io.exists(temp):
        io.remove(temp)
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
    meta_path = features.metadata_path(path)
    if io.exists(meta_path):
      compression = features.read_metadata(meta_path).get("compression", "")
  dataset = tf.data.TFRecordDataset(path, compression_type=compression)
  return [bytes(r) for r in dataset.as_numpy_iterator()]
