"""The library half of data_prep/create_pretraining_data.py: text -> pretraining TFRecords.

`run(DataConfig(...))` reads one-sentence-per-line text (blank lines between documents), makes
masked-LM / next-sentence instances as the original create_pretraining_data.py does, and writes
them with a metadata file beside each output. With reproduce_original the records equal the
original's for the same input, vocab, flags and seed (same examples, same order). By default
the corpus is streamed in blocks of documents made into instances by all cores (the same
algorithm within each block, masked positions drawn lazily; the output depends on the seed and
block_size_mb, not on num_workers). Local paths never import TensorFlow.
"""

import collections
import dataclasses
import multiprocessing
import os
import random
import sys
import time
from typing import Any, Dict, List, Tuple

from absl import logging

from bert_tf import features
from bert_tf import io
from bert_tf import tokenization
from bert_tf.data import corpus
from bert_tf.data import instances as instances_lib
from bert_tf.data import writer as writer_lib

PROGRAM = "bert_tf/data_prep/create_pretraining_data.py"
PROGRAM_VERSION = "0.1.0"


class UsageError(ValueError):
  """Inconsistent or unusable flags; the message names the flag."""


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Everything one run needs; the fields are the command's flags (lists already split)."""

  input_patterns: Tuple[str, ...]
  output_files: Tuple[str, ...]  # empty when output_dir is given
  vocab_file: str
  do_lower_case: bool = True
  do_whole_word_mask: bool = False
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  random_seed: int = 12345
  dupe_factor: int = 10
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  reproduce_original: bool = False
  compression: str = ""
  use_v2_feature_names: bool = False
  overwrite: bool = False
  errors: str = "strict"
  num_workers: int = 0
  block_size_mb: float = 1.0
  output_dir: str = ""
  num_output_shards: int = 1
  segmented_input: bool = False

  def resolved_output_files(self) -> List[str]:
    """The record files to write: the output_file list, or output_dir's shard names.

    Raises:
      UsageError: both or neither of output_files and output_dir, or shards without a folder.
    """
    if self.output_files and self.output_dir:
      raise UsageError("--output_file and --output_dir are mutually exclusive: give a list of "
                       "files, or a folder and --num_output_shards")
    if self.output_dir:
      try:
        return writer_lib.shard_paths(self.output_dir, self.num_output_shards,
                                      self.compression)
      except writer_lib.OutputError as e:
        raise UsageError(str(e)) from None
    if self.num_output_shards != 1:
      raise UsageError("--num_output_shards needs --output_dir (with --output_file the number "
                       "of outputs is the length of its list)")
    if not self.output_files:
      raise UsageError("one of --output_file or --output_dir is required")
    return list(self.output_files)

  def instance_options(self) -> instances_lib.InstanceOptions:
    try:
      return instances_lib.InstanceOptions(
          max_seq_length=self.max_seq_length,
          max_predictions_per_seq=self.max_predictions_per_seq,
          masked_lm_prob=self.masked_lm_prob,
          short_seq_prob=self.short_seq_prob,
          dupe_factor=self.dupe_factor,
          do_whole_word_mask=self.do_whole_word_mask,
          # The default mode's records differ from the original's anyway (blocks); it only
          # needs the same distribution, and the lazy draws save a fifth of its time.
          exact_draws=self.reproduce_original,
          word_tags=self.segmented_input)
    except instances_lib.InstanceOptionsError as e:
      raise UsageError(str(e)) from None

  def flag_values(self) -> Dict[str, Any]:
    """The flags as the command line spells them (recorded in the metadata)."""
    values = dataclasses.asdict(self)
    values["input_file"] = ",".join(values.pop("input_patterns"))
    values["output_file"] = ",".join(values.pop("output_files"))
    return values


class _Progress:
  """Logs documents/s, instances/s and the ETA at most every `interval` seconds."""

  def __init__(self, interval: float = 10.0):
    self.start = time.time()
    self.last = 0.0
    self.interval = interval

  def __call__(self, done: int, total: int, made: int) -> None:
    now = time.time()
    if now - self.last < self.interval and done < total:
      return
    self.last = now
    elapsed = max(now - self.start, 1e-9)
    eta = (total - done) * elapsed / max(done, 1)
    logging.info("instances: %d/%d documents (all passes), %d instances, %.0f docs/s, "
                 "%.0f instances/s, ETA %.0f s", done, total, made, done / elapsed,
                 made / elapsed, eta)


def run(config: DataConfig) -> Dict[str, Any]:
  """Reads, tokenizes, makes instances and writes them with metadata; returns the summary.

  Raises:
    UsageError, corpus.InputError, writer_lib.OutputError, ValueError: bad flags or
      input, with a message naming the flag, file or line.
  """
  options = config.instance_options()
  if config.errors not in corpus.ERRORS_MODES:
    raise UsageError(f"--errors must be one of {', '.join(corpus.ERRORS_MODES)}, "
                     f"got {config.errors!r}")
  if config.compression not in writer_lib.COMPRESSION_TYPES:
    raise UsageError(f"--compression must be '' or GZIP, got {config.compression!r}")
  if config.num_workers < 0:
    raise UsageError(f"--num_workers must be >= 0 (0 = all cores), got {config.num_workers}")
  if not config.block_size_mb > 0:
    raise UsageError(f"--block_size_mb must be positive, got {config.block_size_mb}")
  output_files = config.resolved_output_files()
  # The original reads each glob's matches in directory order; the default mode sorts them so
  # its output does not depend on the filesystem.
  input_files = corpus.expand_input_files(config.input_patterns,
                                         sort=not config.reproduce_original)
  stale_shards = []
  if config.output_dir:
    stale_shards = writer_lib.check_output_dir(config.output_dir, output_files, config.overwrite)
    writer_lib.check_outputs(output_files, config.overwrite, flag="--output_dir")
  else:
    writer_lib.check_outputs(output_files, config.overwrite)

  start = time.time()
  try:
    tokenizer = tokenization.FullTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
  except (OSError, ValueError) as e:
    raise UsageError(f"--vocab_file: {e}") from None
  vocab = instances_lib.VocabTables(tokenizer.vocab, source=f"--vocab_file={config.vocab_file}")
  vocab_md5 = features.vocab_checksum(config.vocab_file)

  # Open the outputs before the long part, so an unwritable destination fails at once.
  with writer_lib.RecordWriter(output_files, config.compression) as writer:
    logging.info("Reading %d input file(s)", len(input_files))
    if config.reproduce_original:
      report, stats, read_seconds = _write_reference(config, options, tokenizer, vocab,
                                                     input_files, writer, start)
    else:
      report, stats, read_seconds = _write_default(config, input_files, tokenizer, writer,
                                                   start)
    writer.finish_writing()
    instance_seconds = time.time() - start - (read_seconds or 0.0)

    counts = {
        "input_files": len(input_files),
        "documents": report.documents,
        "lines": report.lines,
        "tokens": report.tokens,
        "invalid_utf8_lines": report.invalid_utf8_lines,
        "skipped_lines": report.skipped_lines,
        "instances": stats.instances,
        "masked_tokens": stats.masked,
        "random_next": stats.random_next,
        "full_length": stats.full_length,
    }
    # A stale metadata file must never describe new records: remove it, rename the records
    # (each rename is atomic), then write the new metadata. A run killed in between leaves
    # complete records without metadata, never a partial file or a contradiction.
    # Shards of an earlier layout (--overwrite only) go at the same moment: a reader globbing
    # the folder never sees old and new shards together once the run has finished.
    for path in output_files:
      io.remove_if_exists(features.metadata_path(path))
    for path in stale_shards:
      io.remove_if_exists(path)
    sizes = writer.commit()
    for path, count in zip(output_files, writer.counts):
      metadata = features.make_metadata(
          max_seq_length=config.max_seq_length,
          max_predictions_per_seq=config.max_predictions_per_seq,
          use_v2_feature_names=config.use_v2_feature_names,
          vocab_size=len(vocab.replacement_ids), vocab_md5=vocab_md5,
          do_lower_case=config.do_lower_case, do_whole_word_mask=config.do_whole_word_mask,
          flags=config.flag_values(), counts=dict(counts, instances_in_file=count,
                                                  output_files=list(output_files)),
          program_version=f"{PROGRAM} {PROGRAM_VERSION}", compression=config.compression)
      features.write_metadata(features.metadata_path(path), metadata)

  total_seconds = time.time() - start
  summary = stats.summary()
  summary.update(documents=report.documents, output_bytes=sum(sizes), output_files=output_files,
                 read_seconds=read_seconds, instance_seconds=instance_seconds,
                 total_seconds=total_seconds,
                 instances_per_second=stats.instances / max(total_seconds, 1e-9))
  return summary


def _check_documents(report, num_documents, input_files):
  for path in report.empty_files:
    logging.warning("Input file %s is empty", path)
  if report.invalid_utf8_lines:
    logging.warning("%d line(s) were not valid UTF-8 (%s)", report.invalid_utf8_lines,
                    "skipped" if report.skipped_lines else "decoded with U+FFFD")
  if not num_documents:
    raise corpus.InputError(
        f"--input_file: no text found in {', '.join(input_files)} (every file is empty or "
        f"blank)")
  if num_documents == 1:
    logging.warning("The corpus has a single document: next-sentence prediction needs two, so "
                    "every 'random next' segment will come from the same document")


def _write_reference(config, options, tokenizer, vocab, input_files, writer, start):
  """The original algorithm: the whole corpus in memory, one generator, one final shuffle."""

  def read_progress(next_path, report):
    elapsed = max(time.time() - start, 1e-9)
    logging.info("read %d/%d files, %d lines, %.1f MB (%.2f MB/s)%s", report.files,
                 len(input_files), report.lines, report.bytes / 1e6,
                 report.bytes / 1e6 / elapsed, f"; next {next_path}" if next_path else "")

  tokenize = tokenizer.tokenize_to_ids
  if config.segmented_input:
    tokenize = instances_lib.tag_words(tokenize, vocab.size)
  documents, report = instances_lib.read_documents(input_files, tokenize,
                                                   errors=config.errors,
                                                   progress=read_progress)
  read_seconds = time.time() - start
  _check_documents(report, len(documents), input_files)
  logging.info("Read %d documents, %d lines, %d tokens in %.1f s", report.documents,
               report.lines, report.tokens, read_seconds)

  encoder = features.ExampleEncoder(config.max_seq_length, config.max_predictions_per_seq,
                                    vocab.size, config.use_v2_feature_names)
  serializer = writer_lib.Serializer(encoder)
  rng = random.Random(config.random_seed)
  records = instances_lib.create_training_instances(
      documents, options, vocab, rng, transform=serializer, progress=_Progress(),
      progress_every=20)
  del documents
  for record in records:
    writer.write(record)
  return report, serializer.stats, read_seconds


# --- Default mode: blocks of documents, processed in parallel, written in block order ---

_WORKER_STATE = {}


def _init_block_worker(config: DataConfig, tokenizer=None) -> None:
  """Sets up one process's tokenizer, tables and encoder (once, not per block).

  Building a tokenizer costs ~0.8 s of CPU (character classes over all of Unicode); forked
  workers inherit the main process's instead.
  """
  if tokenizer is None:
    tokenizer = tokenization.FullTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
  vocab = instances_lib.VocabTables(tokenizer.vocab, source=config.vocab_file)
  _WORKER_STATE.update(
      config=config, tokenizer=tokenizer, vocab=vocab, options=config.instance_options(),
      encoder=features.ExampleEncoder(config.max_seq_length, config.max_predictions_per_seq,
                                      vocab.size, config.use_v2_feature_names))


def _make_block(task):
  """(block index, documents as text) -> (records, stats, documents, segments, tokens)."""
  index, text_documents = task
  state = _WORKER_STATE
  tokenize = state["tokenizer"].tokenize_to_ids
  if state["config"].segmented_input:
    tokenize = instances_lib.tag_words(tokenize, state["vocab"].size)
  documents = []
  segments = tokens = 0
  for text_document in text_documents:
    document = [ids for ids in map(tokenize, text_document) if ids]
    if document:
      documents.append(document)
      segments += len(document)
      tokens += sum(map(len, document))
  serializer = writer_lib.Serializer(state["encoder"])
  records = []
  if documents:
    rng = instances_lib.block_rng(state["config"].random_seed, index)
    records = instances_lib.create_training_instances(documents, state["options"],
                                                      state["vocab"], rng, transform=serializer)
  return records, serializer.stats, len(documents), segments, tokens


def _write_default(config, input_files, tokenizer, writer, start):
  """Blocks of about block_size_mb, made by worker processes, written in block order."""
  num_workers = config.num_workers or os.cpu_count() or 1
  report = corpus.ReadReport()
  stats = writer_lib.InstanceStats(config.max_seq_length)
  blocks = instances_lib.iter_text_blocks(input_files, int(config.block_size_mb * 1e6),
                                          config.errors, report, window_blocks=64,
                                          random_seed=config.random_seed)
  total_bytes = sum(io.size(p) for p in input_files)
  last_log = [0.0]

  def collect(result):
    records, block_stats, documents, segments, tokens = result
    for record in records:
      writer.write(record)
    stats.merge(block_stats)
    report.documents += documents
    report.segments += segments
    report.tokens += tokens
    now = time.time()
    if now - last_log[0] > 10:
      last_log[0] = now
      elapsed = max(now - start, 1e-9)
      done = report.bytes / max(total_bytes, 1)
      logging.info("%.1f%% of the input, %d documents, %d instances, %.0f docs/s, "
                   "%.0f instances/s, ETA %.0f s", 100 * done, report.documents,
                   stats.instances, report.documents / elapsed, stats.instances / elapsed,
                   elapsed * (1 - done) / max(done, 1e-9))

  tasks = enumerate(blocks)
  if num_workers == 1:
    _init_block_worker(config, tokenizer)
    for task in tasks:
      collect(_make_block(task))
  else:
    # Fork is cheap and safe while TensorFlow is not loaded (local paths never load it).
    method = "fork" if "tensorflow" not in sys.modules else "spawn"
    context = multiprocessing.get_context(method)
    if method == "fork":
      _init_block_worker(config, tokenizer)  # inherited by the workers
      initializer, initargs = None, ()
    else:
      initializer, initargs = _init_block_worker, (config,)
    with context.Pool(num_workers, initializer=initializer, initargs=initargs) as pool:
      # At most a few blocks in flight: memory stays bounded, order is the input's.
      in_flight = collections.deque()
      for task in tasks:
        in_flight.append(pool.apply_async(_make_block, (task,)))
        if len(in_flight) >= 2 * num_workers:
          collect(in_flight.popleft().get())
      while in_flight:
        collect(in_flight.popleft().get())
  _WORKER_STATE.clear()  # the main process's copy: no longer needed
  _check_documents(report, report.documents, input_files)
  return report, stats, None  # reading is pipelined with everything else


def format_summary(summary: Dict[str, Any]) -> str:
  """The end-of-run table printed by the command."""
  if summary["read_seconds"] is None:
    phases = "read, tokenize, instances and writing pipelined"
  else:
    phases = (f"read+tokenize {summary['read_seconds']:.1f} s, instances "
              f"{summary['instance_seconds']:.1f} s")
  return "\n".join([
      f"  documents             {summary['documents']:,}",
      f"  instances             {summary['instances']:,}",
      f"  mean length           {summary['mean_length']:.1f} tokens",
      f"  full-length fraction  {summary['full_length_fraction']:.1%}",
      f"  mean masked tokens    {summary['mean_masked_tokens']:.2f}",
      f"  random-next fraction  {summary['random_next_fraction']:.1%}",
      f"  output size           {summary['output_bytes']:,} bytes",
      f"  time                  {summary['total_seconds']:.1f} s ({phases}), "
      f"{summary['instances_per_second']:.0f} instances/s",
  ])
