"""extract_features' writers: the original's JSONL byte for byte, npz and tfrecord (the
layouts are in run.py's docstring)."""

import contextlib
import json
import os
import shutil
import tempfile
import zipfile
from typing import Any, List, Sequence

import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf import record_schema
from bert_tf.tasks.features.inputs import InputFeatures
from bert_tf.tasks.features.settings import FeatureExtractionError, OUTPUT_FORMATS


# === Writers ===
# A writer gets write_batch(features, values) once per batch, values being the model's output
# for those features: float32 [K, n, S, H], or [K, n, H] with pooling.


def round_values(values: np.ndarray) -> List[Any]:
  """`round(float(x), 6)` of every value, as nested lists: the original's numbers.

  For float32 values numpy gives exactly Python's result, vectorised: x * 10**6 is exact in
  float64 (a 24-bit significand times 15625 * 2**6 fits in 53 bits), rint rounds that exact
  value half to even as Python's correctly rounded round() does, and the division by 10**6 is
  correctly rounded like the decimal-to-float conversion round() ends with. Other dtypes go
  through Python's round().
  """
  values = np.asarray(values)
  if values.dtype == np.float32:
    return np.round(values.astype(np.float64), 6).tolist()

  def rounded(item):
    return [rounded(x) for x in item] if isinstance(item, list) else round(item, 6)

  return rounded(values.astype(np.float64).tolist())


def jsonl_line(feature: InputFeatures, layers: Sequence[int], values: np.ndarray,
               pooling: str = "none") -> str:
  """One output line (with its "\\n") for one feature; values: [K, S, H] or [K, H] (pooled)."""
  values = np.asarray(values)
  if pooling == "none":
    per_token = round_values(values[:, :len(feature.tokens)].transpose(1, 0, 2))  # [n, K, H]
    line = {"linex_index": feature.unique_id, "features": [
        {"token": token, "layers": [{"index": index, "values": layer_values}
                                    for index, layer_values in zip(layers, token_values)]}
        for token, token_values in zip(feature.tokens, per_token)]}
  else:
    line = {"linex_index": feature.unique_id, "pooling": pooling, "layers": [
        {"index": index, "values": layer_values}
        for index, layer_values in zip(layers, round_values(values))]}
  return json.dumps(line) + "\n"


class JsonlWriter:
  """The original's JSON lines, to a binary file-like object."""

  def __init__(self, sink, layers: Sequence[int], pooling: str = "none"):
    self.sink = sink
    self.layers = tuple(layers)
    self.pooling = pooling

  def write_batch(self, features: Sequence[InputFeatures], values: np.ndarray) -> None:
    lines = [jsonl_line(feature, self.layers, values[:, row], self.pooling)
             for row, feature in enumerate(features)]
    self.sink.write("".join(lines).encode("ascii"))  # json.dumps' ensure_ascii


def layer_key(index: int) -> str:
  """The npz array / tfrecord feature name of a layer index: layer_-1, layer_0, ..."""
  return f"layer_{index}"


def _int64s(values: Sequence[int]) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


class TfRecordWriter:
  """One tf.train.Example per line, to a record_schema.RecordFileWriter (or anything with write)."""

  def __init__(self, sink, layers: Sequence[int], pooling: str = "none"):
    self.sink = sink
    self.layers = tuple(layers)
    self.pooling = pooling

  def write_batch(self, features: Sequence[InputFeatures], values: np.ndarray) -> None:
    for row, feature in enumerate(features):
      num_tokens = len(feature.tokens)
      entries = {
          "unique_id": _int64s([feature.unique_id]),
          "tokens": tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[token.encode("utf-8") for token in feature.tokens])),
          "token_ids": _int64s(feature.input_ids[:num_tokens]),
          "input_type_ids": _int64s(feature.input_type_ids[:num_tokens]),
      }
      for k, index in enumerate(self.layers):
        rows = values[k, row] if self.pooling != "none" else values[k, row, :num_tokens]
        entries[layer_key(index)] = tf.train.Feature(float_list=tf.train.FloatList(
            value=np.ascontiguousarray(rows, np.float32).ravel()))
      example = tf.train.Example(features=tf.train.Features(feature=entries))
      self.sink.write(example.SerializeToString())


class NpzWriter:
  """A numpy .npz written without holding the arrays in memory.

  numpy.savez needs whole arrays. Here every array is appended batch by batch to a raw file in
  `scratch_dir` (tokens as UTF-8 lines, their widest length tracked); `finish(sink)` then
  writes the zip archive numpy.load reads (uncompressed, like savez, zip64), each entry an .npy
  header, whose shape is known only then, followed by the raw file copied in chunks. The
  scratch space is the size of the output.
  """

  def __init__(self, scratch_dir: str, layers: Sequence[int], hidden_size: int,
               pooling: str = "none"):
    self.scratch_dir = scratch_dir
    self.layers = tuple(layers)
    self.hidden_size = hidden_size
    self.pooling = pooling
    self.num_lines = 0
    self.num_tokens = 0
    self.token_width = 1
    names = [layer_key(i) for i in self.layers] + ["tokens", "token_ids", "input_type_ids",
                                                   "offsets", "unique_ids"]
    self._files = {name: open(os.path.join(scratch_dir, name), "wb") for name in names}
    self._files["offsets"].write(np.zeros(1, "<i8").tobytes())

  def write_batch(self, features: Sequence[InputFeatures], values: np.ndarray) -> None:
    files = self._files
    lengths = [len(feature.tokens) for feature in features]
    tokens = [token for feature in features for token in feature.tokens]
    if tokens:
      self.token_width = max(self.token_width, max(map(len, tokens)))
    files["tokens"].write("".join(t + "\n" for t in tokens).encode("utf-8"))
    for name in ("token_ids", "input_type_ids"):
      column = "input_ids" if name == "token_ids" else name
      flat = [i for feature, n in zip(features, lengths) for i in getattr(feature, column)[:n]]
      files[name].write(np.asarray(flat, "<i4").tobytes())
    files["unique_ids"].write(np.asarray([f.unique_id for f in features], "<i8").tobytes())
    ends = self.num_tokens + np.cumsum(lengths, dtype=np.int64)
    files["offsets"].write(ends.astype("<i8").tobytes())
    for k, index in enumerate(self.layers):
      if self.pooling == "none":
        rows = np.concatenate([values[k, row, :n] for row, n in enumerate(lengths)])
      else:
        rows = values[k, :len(features)]
      files[layer_key(index)].write(np.ascontiguousarray(rows, "<f4").tobytes())
    self.num_lines += len(features)
    self.num_tokens += sum(lengths)

  def close(self) -> None:
    for f in self._files.values():
      f.close()

  def finish(self, sink) -> None:
    """Writes the archive to a seekable binary file-like object."""
    self.close()
    rows = self.num_tokens if self.pooling == "none" else self.num_lines
    shapes = {layer_key(i): ("<f4", (rows, self.hidden_size)) for i in self.layers}
    shapes.update(tokens=(f"<U{self.token_width}", (self.num_tokens,)),
                  token_ids=("<i4", (self.num_tokens,)),
                  input_type_ids=("<i4", (self.num_tokens,)),
                  offsets=("<i8", (self.num_lines + 1,)),
                  unique_ids=("<i8", (self.num_lines,)))
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
      for name, (dtype, shape) in shapes.items():
        with archive.open(name + ".npy", "w", force_zip64=True) as entry:
          np.lib.format.write_array_header_1_0(
              entry, {"descr": dtype, "fortran_order": False, "shape": shape})
          path = os.path.join(self.scratch_dir, name)
          if name == "tokens":
            self._copy_tokens(path, entry, dtype)
          else:
            with open(path, "rb") as raw:
              shutil.copyfileobj(raw, entry, 1 << 22)
      for name, value in (("layers", np.asarray(self.layers, "<i4")),
                          ("pooling", np.asarray(self.pooling))):
        with archive.open(name + ".npy", "w") as entry:
          np.lib.format.write_array(entry, value, allow_pickle=False)

  @staticmethod
  def _copy_tokens(path: str, entry, dtype: str, chunk_lines: int = 1 << 16) -> None:
    with open(path, "rb") as raw:
      chunk = []
      for line in raw:
        chunk.append(line[:-1].decode("utf-8"))
        if len(chunk) == chunk_lines:
          entry.write(np.asarray(chunk, dtype).tobytes())
          chunk = []
      if chunk:
        entry.write(np.asarray(chunk, dtype).tobytes())


@contextlib.contextmanager
def open_writer(output_file: str, output_format: str, layers: Sequence[int], hidden_size: int,
                pooling: str = "none"):
  """A writer for output_file that becomes output_file only when the block succeeds.

  Yields an object with write_batch(features, values). Everything is written under a
  temporary name (bert_tf.io); on an exception nothing is left under output_file.
  """
  if output_format == "jsonl":
    with io.atomic_write(output_file, "wb") as f:
      yield JsonlWriter(f, layers, pooling)
  elif output_format == "tfrecord":
    with record_schema.RecordFileWriter(output_file) as records:
      yield TfRecordWriter(records, layers, pooling)
  elif output_format == "npz":
    # Scratch files beside a local output (same disk, cleaned up like io's temporaries), in the
    # system's temporary directory for gs:// and other remote outputs.
    if io.is_local(output_file):
      scratch = io.temp_name(output_file, ".parts")
      io.remove_if_exists(scratch)
      io.makedirs(scratch)
    else:
      scratch = tempfile.mkdtemp(prefix="extract_features_")
    try:
      writer = NpzWriter(scratch, layers, hidden_size, pooling)
      try:
        yield writer
      finally:
        writer.close()
      if io.is_local(output_file):
        with io.atomic_write(output_file, "wb") as f:
          writer.finish(f)
      else:
        archive = os.path.join(scratch, "archive.npz")
        with open(archive, "wb") as f:
          writer.finish(f)
        io.copy(archive, output_file)
    finally:
      shutil.rmtree(scratch, ignore_errors=True)
  else:
    raise FeatureExtractionError(f"--output_format must be one of {', '.join(OUTPUT_FORMATS)}, "
                                 f"got {output_format!r}")
