"""The library half of data_prep/create_pretraining_data.py: text -> pretraining TFRecords.

`run(DataConfig(...))` reads one-sentence-per-line text (blank lines between documents), makes
masked-LM / next-sentence instances as the original create_pretraining_data.py does, and writes
them with a metadata file beside each output. With reproduce_original the records equal the
original's for the same input, vocab, flags and seed (same examples, same order). By default
the corpus is streamed in blocks of documents made into instances by all cores (the same
algorithm within each block, masked positions drawn lazily; the output depends on the seed and
block_size_mb, not on num_workers). Local paths never import TensorFlow.

Reliability decisions:

* No empty record files. Instances go round-robin over the outputs (as in the original, in both
  modes), so with fewer instances than outputs only the first ones get records. How many
  instances a corpus makes is only known at the end, so this cannot be refused up front;
  instead only the outputs with records are written, a warning says so, and their metadata
  lists the outputs not written (`counts.outputs_not_written`). With output_dir the shards are
  named after the number written (`pretraining-00000-of-00077.tfrecord` when 200 were asked
  for and 77 instances were made); with an output_files list the first files are written and
  the rest are not created (an empty or, with overwrite, older file of such a name is
  removed). Every written file holds the same records as in a run with that many outputs, and
  with reproduce_original the same records as the original's file of that name (the original
  would also have created the empty ones, on which training spins forever).
* Commit. Records and metadata are complete under temporary names before anything final is
  touched, and the final renames are journaled (writer.RecordWriter.commit): a run killed
  while committing leaves a journal, and the next run on the same outputs rolls that commit
  back before its checks, so the same command simply works again (no --overwrite needed for
  what only the killed run made). Final record files without metadata and without a journal
  (e.g. the original script's output) still need --overwrite.
* Outputs that are one file under two spellings, or an output named like another output's
  metadata file, are refused up front, naming both.
* Lines longer than LONG_LINE_BYTES_PER_TOKEN * 100 * max_seq_length bytes get a warning naming
  file and line: the algorithm (the original's, kept) uses only about max_seq_length tokens of
  such a line. The count is in the metadata (`counts.long_lines`).
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


# A line longer than this many bytes per token times 100 * max_seq_length is warned about: about
# 100 instances' worth of English (~4-5 bytes per WordPiece token; CJK ~3), of which one is used.
LONG_LINE_BYTES_PER_TOKEN = 4
_LONG_LINE_WARNINGS = 10  # then only counted (and summed up at the end)


class _LineWatchingReport(corpus.ReadReport):
  """A corpus.ReadReport that warns about very long lines, naming the file and line.

  corpus.iter_lines counts each line (`lines += 1`) and then its bytes (`bytes += len(raw)`),
  and each file (`files += 1`) before its first line; the input files are read in the order
  given, so the file and line of every increment are known here without re-reading anything.
  """

  def __init__(self, input_files: List[str], max_line_bytes: int):
    self._input_files = list(input_files)
    self.max_line_bytes = max_line_bytes
    self._bytes = 0
    self._files = 0
    self._first_line = 0  # report.lines before the current file
    self.long_lines = 0
    super().__init__()

  @property
  def files(self) -> int:
    return self._files

  @files.setter
  def files(self, value: int) -> None:
    self._files = value
    self._first_line = getattr(self, "lines", 0)

  @property
  def bytes(self) -> int:
    return self._bytes

  @bytes.setter
  def bytes(self, value: int) -> None:
    if value - self._bytes > self.max_line_bytes:
      self._long_line(value - self._bytes)
    self._bytes = value

  def _long_line(self, size: int) -> None:
    self.long_lines += 1
    if self.long_lines > _LONG_LINE_WARNINGS:
      return
    index = self._files - 1
    path = self._input_files[index] if 0 <= index < len(self._input_files) else "?"
    logging.warning(
        "%s:%d: a line of %d bytes (over %d): only about --max_seq_length tokens of one line "
        "reach an instance, the rest of it is not used (the original algorithm); put one "
        "sentence per line%s", path, self.lines - self._first_line, size,
        self.max_line_bytes, "" if self.long_lines < _LONG_LINE_WARNINGS else
        " (further long lines are only counted)")


def _line_report(config: "DataConfig", input_files: List[str]) -> _LineWatchingReport:
  return _LineWatchingReport(
      input_files, LONG_LINE_BYTES_PER_TOKEN * 100 * config.max_seq_length)


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
  flag = "--output_dir" if config.output_dir else "--output_file"
  writer_lib.check_distinct_outputs(output_files, flag)
  # A run killed while committing to these outputs left a journal: undo that commit first, so
  # its half-renamed files neither block this run nor mix with its outputs.
  for journal, removed in writer_lib.recover_interrupted_commits(
      output_files, config.output_dir, config.overwrite, flag):
    logging.warning("Rolled back the unfinished commit of a killed run (%s): removed %d "
                    "file(s)", journal, len(removed))
  stale_shards = []
  if config.output_dir:
    stale_shards = writer_lib.check_output_dir(config.output_dir, output_files, config.overwrite)
  writer_lib.check_outputs(output_files, config.overwrite, flag=flag)

  start = time.time()
  try:
    tokenizer = tokenization.FullTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
  except (OSError, ValueError) as e:
    raise UsageError(f"--vocab_file: {e}") from None
  vocab = instances_lib.VocabTables(tokenizer.vocab, source=f"--vocab_file={config.vocab_file}")
  vocab_md5 = features.vocab_checksum(config.vocab_file)

  # Open the outputs before the long part, so an unwritable destination fails at once.
  with writer_lib.RecordWriter(output_files, config.compression, flag=flag) as writer:
    logging.info("Reading %d input file(s)", len(input_files))
    if config.reproduce_original:
      report, stats, read_seconds = _write_reference(config, options, tokenizer, vocab,
                                                     input_files, writer, start)
    else:
      report, stats, read_seconds = _write_default(config, input_files, tokenizer, writer,
                                                   start)
    writer.finish_writing()
    instance_seconds = time.time() - start - (read_seconds or 0.0)

    final_files, remove = _final_layout(config, output_files, stale_shards, writer.counts,
                                        stats.instances, input_files)
    written = [f for f in final_files if f]
    not_written = [p for p, f in zip(output_files, final_files) if not f]
    counts = {
        "input_files": len(input_files),
        "documents": report.documents,
        "lines": report.lines,
        "tokens": report.tokens,
        "invalid_utf8_lines": report.invalid_utf8_lines,
        "skipped_lines": report.skipped_lines,
        "long_lines": report.long_lines,
        "instances": stats.instances,
        "masked_tokens": stats.masked,
        "random_next": stats.random_next,
        "full_length": stats.full_length,
    }
    extra = {"outputs_not_written": not_written} if not_written else {}
    metadata = [None if final is None else features.make_metadata(
        max_seq_length=config.max_seq_length,
        max_predictions_per_seq=config.max_predictions_per_seq,
        use_v2_feature_names=config.use_v2_feature_names,
        vocab_size=len(vocab.replacement_ids), vocab_md5=vocab_md5,
        do_lower_case=config.do_lower_case, do_whole_word_mask=config.do_whole_word_mask,
        flags=config.flag_values(), counts=dict(counts, instances_in_file=count,
                                                output_files=written, **extra),
        program_version=f"{PROGRAM} {PROGRAM_VERSION}", compression=config.compression)
                for final, count in zip(final_files, writer.counts)]
    # Records and metadata are complete under temporary names before anything final changes;
    # the renames (records, then metadata) are journaled: see writer.RecordWriter.commit.
    # Shards of an earlier layout (--overwrite only) go in the same commit: a reader globbing
    # the folder never sees old and new shards together once the run has finished.
    sizes = writer.commit(final_files, metadata, remove=remove)

  if report.long_lines:
    logging.warning("%d line(s) were longer than %d bytes: only their beginning was used",
                    report.long_lines, report.max_line_bytes)
  output_files = written
  total_seconds = time.time() - start
  summary = stats.summary()
  summary.update(documents=report.documents, output_bytes=sum(sizes), output_files=output_files,
                 read_seconds=read_seconds, instance_seconds=instance_seconds,
                 total_seconds=total_seconds,
                 instances_per_second=stats.instances / max(total_seconds, 1e-9))
  return summary


def _final_layout(config, output_files, stale_shards, counts, instances, input_files):
  """(final name or None for each output, files to remove in the commit): no empty outputs.

  See the module docstring: only outputs with records are written; output_dir's shards are
  then named after how many there are.

  Raises:
    corpus.InputError: no instances at all (nothing to write).
  """
  if not instances:
    raise corpus.InputError(
        f"--input_file: {', '.join(input_files)} made no instances (every document is too "
        f"short?); nothing was written")
  kept = sum(1 for c in counts if c)
  # Round-robin from the first output: the outputs with records are the first `kept`.
  assert all(counts[:kept]) and not any(counts[kept:]), counts
  if kept == len(output_files):
    finals = list(output_files)
  elif config.output_dir:
    finals = writer_lib.shard_paths(config.output_dir, kept, config.compression)
    finals += [None] * (len(output_files) - kept)
  else:
    finals = list(output_files[:kept]) + [None] * (len(output_files) - kept)
  not_written = output_files[kept:]
  if not_written:
    logging.warning(
        "%d instance(s) for %d output files: writing only %d (an empty record file would make "
        "training wait forever)%s; not written: %s%s", instances, len(output_files), kept,
        f", named {os.path.basename(finals[0])} ..." if config.output_dir else "",
        ", ".join(not_written[:3]), " ..." if len(not_written) > 3 else "")
  # Files that would contradict the new outputs once committed: earlier shards of another
  # layout (checked up front: empty, or --overwrite) and outputs not written this time (empty,
  # or --overwrite), each with its metadata.
  written = [f for f in finals if f]
  candidates = set(stale_shards)
  for path in not_written:
    candidates.update((path, features.metadata_path(path)))
  if config.output_dir:
    found = writer_lib.foreign_shards(config.output_dir, written)
  else:
    found = [p for p in sorted(candidates) if io.exists(p)]
  return finals, [p for p in found if p in candidates]


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
                                                   report=_line_report(config, input_files),
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
  report = _line_report(config, input_files)
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
