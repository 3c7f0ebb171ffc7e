"""create_pretraining_data's default mode as an Apache Beam pipeline (DirectRunner, Dataflow,
Flink, Spark): `python data_prep/create_pretraining_data.py --runner=NAME ...`.

The only module that imports apache_beam (install the extra: `pip install -e '.[beam]'`).

The pipeline runs the default mode's block plan (instances.plan_windows) with the same code
as the local mode, so for the same input, flags and seed both make the same records:

  windows of the plan (made here from the file sizes)
    | Reshuffle                      spread the windows over the workers
    | ReadWindows                    read each window's byte ranges, shuffle its documents, cut
                                     blocks keyed (window index, block index)
    | Reshuffle                      spread the blocks over the workers
    | MakeInstances                  pretraining_data.BlockMaker: the block's records, in order
    | WriteToTFRecord                Beam's own sink: --num_output_shards shards, GZIP optional
    | CountRecords                   each shard's records, read back from its length headers
  the counts of windows, blocks and shards | SumCounts -> <staging>/counts.json

Equality with the local mode: the same multiset of records (byte for byte: the same
serialisation). Not the same order or shard assignment: Beam's sink deals records to shards
itself (round robin from a random start per bundle), so a shard holds other records, in
another order, than the local mode's shard of the same name; a training run shuffles them
anyway.

The main process holds the output folders' locks (pretraining_data.output_locks), checks the
outputs as the local mode does (a rerun is refused without --overwrite; a killed run's
commit is rolled back), and has the sink write into a staging folder
`<output folder>/beam-staging.incomplete-<pid>/`. Only after the pipeline has succeeded are
the shards moved to their final names with their metadata (counts summed in the pipeline), in
the local mode's journaled commit (writer.RecordWriter.commit); a failed pipeline leaves no
shard under a final name and its staging folder is deleted (a killed main process leaves one
named as incomplete, which the next run removes). Shards that received no record (fewer
instances than shards) are not committed, as in the local mode.

--runner=DirectRunner runs on Beam's FnApiRunner (direct_runner: never Beam's Prism runner,
which Beam's DirectRunner would first download).

Retries: a bundle that fails is retried by runners that retry (Dataflow, Flink, Spark,
BundleBasedDirectRunner; the DirectRunner's FnApiRunner fails the pipeline instead).
A retried bundle's output is discarded, so no record is lost or written twice. For the same
reason the figures of the metadata and summary (documents, lines, masked tokens, records per
shard, ...) travel as pipeline data, not as Beam metrics: each window, block and shard emits a
dict of counts, summed by a CombineFn into one JSON file in the staging folder (metrics may
keep a failed attempt's increments, e.g. the BundleBasedDirectRunner's "committed" ones).
BERT_TF_BEAM_FAIL_ONCE_DIR (tests only) makes the first attempt at every block fail, leaving
a marker file in that folder.
"""

import contextlib
import json
import logging as std_logging
import os
import re
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.runner import PipelineState
from absl import logging

from bert_tf import io
from bert_tf.data import corpus
from bert_tf.data import instances as instances_lib
from bert_tf.data import pretraining_data
from bert_tf.data import writer as writer_lib

NAMESPACE = "bert_tf.create_pretraining_data"
STAGING_NAME = "beam-staging"
SHARD_PREFIX = "pretraining"
FAIL_ONCE_ENV = "BERT_TF_BEAM_FAIL_ONCE_DIR"
_RECORDS_IN = "records_in:"  # + a staged shard's name: its record count


class InjectedFault(RuntimeError):
  """The test hook's failure (see FAIL_ONCE_ENV)."""


class PipelineFailed(RuntimeError):
  """The runner reported a state other than DONE."""


# A worker's error of ours, as a runner's exception quotes it (the multi-process DirectRunner
# and Dataflow wrap it in a RuntimeError holding the worker's traceback): its type and message.
# Beam appends the step it was running to a DoFn's error message.
_STEP_SUFFIX = r" \[while running '[^']*'\]"
_WORKER_ERROR = re.compile(r"^bert_tf\.[\w.]+\.(InputError|OutputError): (.*?)"
                           rf"(?:{_STEP_SUFFIX})?$", re.M)


# The loggers that log a failed bundle's traceback (the worker's DoFn runner and harness, the
# runner relaying a worker's log): hidden at the default verbosity, as the failure is raised.
_FAILURE_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                    "apache_beam.runners.worker.bundle_processor",
                    "apache_beam.runners.portability.local_job_service")


def worker_error(error: BaseException) -> Optional[BaseException]:
  """The one-line error of ours that a runner's exception carries from a worker, or None."""
  match = _WORKER_ERROR.search(str(error))
  if match is None:
    return None
  kind = corpus.InputError if match.group(1) == "InputError" else writer_lib.OutputError
  return kind(match.group(2))


@contextlib.contextmanager
def _quiet_beam_logs() -> Iterator[None]:
  """At the default verbosity, for the block: the runner's and workers' INFO lines (hundreds
  even on the DirectRunner; --verbosity=1 shows them, workers' progress lines included) and
  the tracebacks Beam logs of a failed bundle (_run_to_the_end reports the failure once)."""
  levels = {name: std_logging.getLogger(name).level
            for name in ("apache_beam",) + _FAILURE_LOGGERS}
  if logging.get_verbosity() < logging.DEBUG:
    for name in levels:
      std_logging.getLogger(name).setLevel(
          std_logging.WARNING if name == "apache_beam" else std_logging.CRITICAL)
  try:
    yield
  finally:
    for name, level in levels.items():
      std_logging.getLogger(name).setLevel(level)


def _run_to_the_end(pipeline) -> Any:
  """Runs the pipeline and waits: its final state. A worker's InputError or OutputError is
  raised as itself (the file and line it names), not as the runner's wrapper and traceback."""
  try:
    return pipeline.run().wait_until_finish()
  except (corpus.InputError, writer_lib.OutputError) as e:
    # In this process (the in-memory DirectRunner): Beam added the step it was running.
    raise type(e)(re.sub(_STEP_SUFFIX + "$", "", str(e))) from None
  except Exception as e:  # pylint: disable=broad-except
    ours = worker_error(e)
    if ours is None:
      raise
    raise ours from None


def pipeline_options(beam_args: Sequence[str]) -> PipelineOptions:
  """Beam's PipelineOptions from the command line's Beam flags (--runner=... and the rest).

  Raises:
    pretraining_data.UsageError: no --runner, or a flag that no Beam option class knows (a
      typo would otherwise be dropped silently by Beam).
  """
  options = PipelineOptions(list(beam_args))
  known = set(options.get_all_options(drop_default=False))
  given = options.get_all_options(retain_unknown_options=True)
  unknown = sorted(set(given) - known)
  if unknown:
    raise pretraining_data.UsageError(
        f"unknown flag(s) {', '.join('--' + name for name in unknown)}: neither a flag of "
        f"this tool nor an Apache Beam pipeline option (see --help, and Beam's "
        f"PipelineOptions for the runner's)")
  if not options.view_as(StandardOptions).runner:
    raise pretraining_data.UsageError("the Beam pipeline needs --runner (DirectRunner, "
                                      "DataflowRunner, FlinkRunner, SparkRunner, ...)")
  return options


_DIRECT_RUNNER_NAMES = ("directrunner", "switchingdirectrunner")


def is_direct_runner(runner_name) -> bool:
  """Whether --runner names Beam's DirectRunner ("DirectRunner", "direct", its class path)."""
  if not runner_name:
    return False
  name = str(runner_name).rsplit(".", 1)[-1].lower()
  return name in _DIRECT_RUNNER_NAMES or name + "runner" in _DIRECT_RUNNER_NAMES


def direct_runner(options: PipelineOptions):
  """The runner that --runner=DirectRunner means here: Beam's FnApiRunner, in this process or
  --direct_num_workers workers (--direct_running_mode), with the pipeline options.

  Beam's own DirectRunner (2.77) first tries its Prism runner, a Go binary it downloads from
  GitHub at run time, and falls back to the FnApiRunner only when that fails (offline). So the
  same command would run on different runners by whether the machine is online, download a
  program the first time, and leave empty folders in /tmp (beam-temp*, tmp*) each run. The FnApiRunner
  is the runner this package is tested on; --runner=PrismRunner still asks for Prism.
  """
  # pylint: disable=g-import-not-at-top
  from apache_beam.portability.api import beam_provision_api_pb2
  from apache_beam.runners.portability import portable_runner
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  # The workers read their options (e.g. --default_sdk_harness_log_level) from the provision
  # info, as under the DirectRunner's own switch to this runner.
  encoded = portable_runner.JobServiceHandle.encode_pipeline_options(options.get_all_options())
  return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
      beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


COUNTS = "counts"  # the tag of the DoFns' counts output
COUNTS_FILE = "counts.json"


class _SumCounts(beam.CombineFn):
  """Sums dicts of counts key by key (an empty input gives {})."""

  def create_accumulator(self):
    return {}

  def add_input(self, accumulator, counts):
    for name, value in counts.items():
      accumulator[name] = accumulator.get(name, 0) + value
    return accumulator

  def merge_accumulators(self, accumulators):
    total = {}
    for accumulator in accumulators:
      self.add_input(total, accumulator)
    return total

  def extract_output(self, accumulator):
    return accumulator


class _ReadWindows(beam.DoFn):
  """(window index, pieces) -> ((window index, block index), documents) for each block."""

  def __init__(self, input_files: List[str], block_bytes: int, errors: str, random_seed: int,
               max_line_bytes: int):
    super().__init__()
    self._input_files = list(input_files)
    self._block_bytes = block_bytes
    self._errors = errors
    self._random_seed = random_seed
    self._max_line_bytes = max_line_bytes

  def process(self, element):
    window_index, pieces = element
    report = corpus.ReadReport()
    long_lines = pretraining_data.LongLines(self._max_line_bytes)
    documents = instances_lib.read_window(self._input_files, pieces, self._errors, report,
                                          self._max_line_bytes, long_lines)
    blocks = instances_lib.cut_window(documents, self._block_bytes, self._random_seed,
                                      window_index)
    counts = {name: getattr(report, name) for name in (
        "files", "lines", "bytes", "invalid_utf8_lines", "skipped_lines",
        "carriage_return_lines")}
    yield beam.pvalue.TaggedOutput(COUNTS, dict(counts, long_lines=long_lines.count,
                                                blocks=len(blocks)))
    for block_index, block in enumerate(blocks):
      yield (window_index, block_index), block


class _MakeInstances(beam.DoFn):
  """((window index, block index), documents) -> the block's serialised records."""

  def __init__(self, config: pretraining_data.DataConfig, total_bytes: int):
    super().__init__()
    self._config = config
    self._total_bytes = max(total_bytes, 1)
    self._maker = None

  def setup(self):
    self._maker = pretraining_data.BlockMaker(self._config)
    self._start = time.time()
    self._last_log = self._start
    self._done = [0, 0, 0]  # blocks, instances, bytes of text made by this worker

  def process(self, element):
    key, text_documents = element
    fail_dir = os.environ.get(FAIL_ONCE_ENV)
    if fail_dir:
      _fail_first_attempt(fail_dir, key)
    result = self._maker(key, text_documents)
    stats = result.stats
    yield beam.pvalue.TaggedOutput(COUNTS, {
        "instances": stats.instances, "instance_tokens": stats.tokens,
        "full_length": stats.full_length, "masked_tokens": stats.masked,
        "random_next": stats.random_next, "documents": result.documents,
        "segments": result.segments, "tokens": result.tokens})
    self._progress(stats.instances, sum(len(line) + 1 for document in text_documents
                                        for line in document))
    yield from result.records

  def _progress(self, instances: int, text_bytes: int) -> None:
    self._done[0] += 1
    self._done[1] += instances
    self._done[2] += text_bytes
    now = time.time()
    if now - self._last_log < 30:
      return
    self._last_log = now
    elapsed = max(now - self._start, 1e-9)
    share = self._done[2] / self._total_bytes
    logging.info("this worker: %d blocks, %d instances (%.0f/s), %.1f%% of the input's text "
                 "(alone it would finish in %.0f s more)", self._done[0], self._done[1],
                 self._done[1] / elapsed, 100 * share, elapsed * (1 - share) / max(share, 1e-9))


def _fail_first_attempt(fail_dir: str, key: Tuple[int, int]) -> None:
  """The fault-injection hook: the first attempt at each block raises (marker per block)."""
  marker = os.path.join(fail_dir, f"block-{key[0]}-{key[1]}")
  try:
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
  except FileExistsError:
    return  # a retry: this block already failed once
  os.close(fd)
  raise InjectedFault(f"injected failure of the first attempt at block {key}")


def _count_records(path: str, compression: str) -> Dict[str, int]:
  return {_RECORDS_IN + path.rsplit("/", 1)[-1]: writer_lib.count_records(path, compression)}


def build_pipeline(pipeline: beam.Pipeline, config: pretraining_data.DataConfig,
                   input_files: List[str], file_sizes: List[int], staging: str,
                   num_shards: int) -> None:
  """Adds the transforms (see the module docstring) to `pipeline`."""
  block_bytes = pretraining_data.block_bytes(config)
  plan = instances_lib.plan_windows(file_sizes, block_bytes * instances_lib.WINDOW_BLOCKS)
  max_line_bytes = pretraining_data.long_lines_for(config).max_line_bytes
  suffix = ".tfrecord.gz" if config.compression == "GZIP" else ".tfrecord"
  compression = (CompressionTypes.GZIP if config.compression == "GZIP"
                 else CompressionTypes.UNCOMPRESSED)
  blocks = (
      pipeline
      | "Windows" >> beam.Create(list(enumerate(plan)))
      | "SpreadWindows" >> beam.Reshuffle()
      | "ReadWindows" >> beam.ParDo(_ReadWindows(input_files, block_bytes, config.errors,
                                                 config.random_seed, max_line_bytes)
                                    ).with_outputs(COUNTS, main="blocks"))
  made = (
      blocks.blocks
      | "SpreadBlocks" >> beam.Reshuffle()
      | "MakeInstances" >> beam.ParDo(_MakeInstances(config, sum(file_sizes))
                                      ).with_outputs(COUNTS, main="records"))
  shards = made.records | "Write" >> beam.io.WriteToTFRecord(
      io.join(staging, SHARD_PREFIX), file_name_suffix=suffix, num_shards=num_shards,
      shard_name_template="-SSSSS-of-NNNNN", compression_type=compression)
  shard_counts = (shards
                  | "SpreadShards" >> beam.Reshuffle()
                  | "CountRecords" >> beam.Map(_count_records, config.compression))
  _ = ((blocks[COUNTS], made[COUNTS], shard_counts)
       | "AllCounts" >> beam.Flatten()
       | "SumCounts" >> beam.CombineGlobally(_SumCounts())
       | "ToJson" >> beam.Map(lambda counts: json.dumps(counts, sort_keys=True))
       | "WriteCounts" >> beam.io.WriteToText(io.join(staging, COUNTS_FILE), num_shards=1,
                                              shard_name_template=""))


def _read_counts(staging: str) -> Dict[str, int]:
  """The summed counts the pipeline wrote (see build_pipeline)."""
  return json.loads(io.read_text(io.join(staging, COUNTS_FILE)))


def _report_and_stats(totals: Dict[str, int], input_files: Sequence[str], sizes: Sequence[int],
                      config: pretraining_data.DataConfig, counts: Sequence[int]):
  """The local run's ReadReport and InstanceStats, from the workers' summed counters."""
  report = corpus.ReadReport(
      files=totals.get("files", 0) + sum(1 for size in sizes if not size),
      empty_files=[p for p, size in zip(input_files, sizes) if not size],
      lines=totals.get("lines", 0), bytes=totals.get("bytes", 0),
      invalid_utf8_lines=totals.get("invalid_utf8_lines", 0),
      skipped_lines=totals.get("skipped_lines", 0),
      carriage_return_lines=totals.get("carriage_return_lines", 0),
      documents=totals.get("documents", 0), segments=totals.get("segments", 0),
      tokens=totals.get("tokens", 0))
  stats = writer_lib.InstanceStats(
      config.max_seq_length, instances=sum(counts), tokens=totals.get("instance_tokens", 0),
      full_length=totals.get("full_length", 0), masked=totals.get("masked_tokens", 0),
      random_next=totals.get("random_next", 0))
  return report, stats


def run(config: pretraining_data.DataConfig, beam_args: Sequence[str]) -> Dict[str, Any]:
  """The default mode on Beam: same checks, records, metadata and summary as the local run.

  Args:
    config: the command's flags (reproduce_original must be False; num_workers is unused: the
      runner's options decide).
    beam_args: the Beam pipeline flags, e.g. ["--runner=DirectRunner",
      "--direct_num_workers=2", "--direct_running_mode=multi_processing"].

  Returns:
    The summary (pretraining_data.format_summary prints it).

  Raises:
    pretraining_data.UsageError, corpus.InputError, writer_lib.OutputError,
    io.DirectoryInUseError, PipelineFailed, and whatever the runner raises for a failed step.
  """
  if config.reproduce_original:
    raise pretraining_data.UsageError(
        "--reproduce_original shuffles the whole corpus in one process; it has no Beam "
        "pipeline (drop --runner, or drop --reproduce_original)")
  pretraining_data.validate(config)
  quiet = []  # not recorded in the metadata, which keeps the options the user gave
  if logging.get_verbosity() < logging.DEBUG and not any(
      arg.startswith("--default_sdk_harness_log_level") for arg in beam_args):
    # The workers' own INFO lines (each one's start-up and shut-down) go with the runner's,
    # and so do the tracebacks they log of a failed bundle (the failure is reported once).
    quiet = ["--default_sdk_harness_log_level=WARNING",
             "--sdk_harness_log_level_overrides=" + json.dumps(
                 {name: "CRITICAL" for name in _FAILURE_LOGGERS})]
  options = pipeline_options(list(beam_args) + quiet)
  input_files, output_files, flag = pretraining_data.resolve_files(config)
  with pretraining_data.output_locks(config, output_files, flag):
    stale_shards = pretraining_data.check_outputs(config, output_files, flag)
    start = time.time()
    _, vocab, vocab_md5 = pretraining_data.load_vocab(config)  # refuse a bad vocab up front
    folder = config.output_dir or os.path.dirname(output_files[0]) or "."
    io.remove_stale_temp_files(io.join(folder, STAGING_NAME))  # left by killed runs
    staging = io.temp_name(io.join(folder, STAGING_NAME))
    sizes = [io.size(p) for p in input_files]
    runner = options.view_as(StandardOptions).runner
    direct = is_direct_runner(runner)
    logging.info("Running the Beam pipeline on %s: %d input file(s), %.1f MB, staging in %s",
                 f"{runner} (Beam's FnApiRunner)" if direct else runner, len(input_files),
                 sum(sizes) / 1e6, staging)
    writer = None
    try:
      io.makedirs(staging)
      with _quiet_beam_logs():
        pipeline = beam.Pipeline(runner=direct_runner(options) if direct else None,
                                 options=options)
        build_pipeline(pipeline, config, input_files, sizes, staging, len(output_files))
        state = _run_to_the_end(pipeline)
      if state != PipelineState.DONE:
        raise PipelineFailed(f"the Beam pipeline ended in state {state} (runner {runner}); "
                             f"nothing was committed")
      totals = _read_counts(staging)
      staged, counts = _staged_shards(staging, totals, len(output_files), flag)

      report, stats = _report_and_stats(totals, input_files, sizes, config, counts)
      if totals.get("instances", 0) != stats.instances:
        raise writer_lib.OutputError(
            f"{flag}: the blocks made {totals.get('instances', 0)} instances but the shards "
            f"in {staging} hold {stats.instances}; nothing was committed")
      pretraining_data.check_documents(report, report.documents, input_files)
      long_lines = totals.get("long_lines", 0)
      if long_lines:
        logging.warning("%d line(s) were longer than %d bytes: only their beginning was used "
                        "(the workers' logs name them)", long_lines,
                        pretraining_data.long_lines_for(config).max_line_bytes)

      writer = writer_lib.RecordWriter.of_written_files(output_files, staged, counts, flag)
      final_files, remove = pretraining_data.final_layout(
          config, output_files, stale_shards, counts, stats.instances, input_files)
      metadata = pretraining_data.make_metadata(
          config, pretraining_data.make_counts(report, stats, input_files, long_lines), vocab,
          vocab_md5, output_files, final_files, counts,
          extra_flags={"beam_pipeline_options": list(beam_args)})
      sizes = writer.commit(final_files, metadata, remove=remove)
    except BaseException:
      if writer is not None:
        writer.abort()
      raise
    finally:
      try:
        io.remove_if_exists(staging)
      except Exception:  # pylint: disable=broad-except
        logging.warning("Could not delete the staging folder %s (its name says it is "
                        "incomplete; the next run removes it)", staging)
  return pretraining_data.make_summary(stats, report.documents, sizes,
                                       [f for f in final_files if f], None,
                                       time.time() - start, start)


def _staged_shards(staging: str, totals: Dict[str, int], num_shards: int,
                   flag: str) -> Tuple[List[str], List[int]]:
  """The sink's shards in the staging folder, those with records first, and their counts."""
  suffixes = (".tfrecord", ".tfrecord.gz")
  names = sorted(n for n in io.listdir(staging)
                 if n.startswith(SHARD_PREFIX + "-") and n.endswith(suffixes))
  if len(names) != num_shards:
    raise writer_lib.OutputError(
        f"{flag}: the Beam sink wrote {len(names)} shard(s) in {staging}, expected "
        f"{num_shards}; nothing was committed")
  missing = [n for n in names if _RECORDS_IN + n not in totals and io.size(
      io.join(staging, n)) > 0]
  if missing:
    raise writer_lib.OutputError(f"{flag}: no record count for {missing[0]} in the "
                                 f"pipeline's counts; nothing was committed")
  counts = {n: totals.get(_RECORDS_IN + n, 0) for n in names}
  # Round-robin outputs with records come first (final_layout); a shard the sink left empty
  # (fewer instances than shards) is not committed.
  names.sort(key=lambda n: counts[n] == 0)
  return [io.join(staging, n) for n in names], [counts[n] for n in names]
