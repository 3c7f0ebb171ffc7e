"""data_prep/create_pretraining_data.py on Apache Beam (bert_tf/data/beam_pipeline.py), the block
plan it shares with the local mode (instances.plan_windows, corpus.iter_piece_lines), and the
output folder lock of both modes.

The Beam runs use the DirectRunner in memory (one process: a few seconds each; Beam's
FnApiRunner, never Prism); one test runs it with two worker processes, and the fault test uses
the BundleBasedDirectRunner, the DirectRunner mode that retries a failed bundle (the FnApiRunner
fails the pipeline instead).
"""

import json
import os
import random
import subprocess
import sys
import time

import pytest

from bert_tf import io as bert_io
from bert_tf import record_schema
from bert_tf.data import beam_pipeline
from bert_tf.data import corpus
from bert_tf.data import instances as I
from bert_tf.data import pretraining_data as cpd
from bert_tf.data import writer as writer_lib

from tests import helpers
from tests.helpers import REPO_ROOT, TEST_DATA

VOCAB_FILE = os.path.join(TEST_DATA, "vocab_uncased.txt")
ZH_INPUT = os.path.join(TEST_DATA, "cpd_zh_60k.txt")
AUSTEN = os.path.join(TEST_DATA, "cpd_austen_100k.txt")
IN_MEMORY = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
  """Three files: two fixtures and a small one that does not end with a blank line."""
  base = tmp_path_factory.mktemp("inputs")
  tail = base / "tail.txt"
  tail.write_text("".join(f"Tail sentence {i} of a file without a final blank line.\n"
                          for i in range(30)))
  return [AUSTEN, ZH_INPUT, str(tail)]


def _config(inputs, **overrides):
  # Blocks of 10 kB: windows of 640 kB, so the 166 kB of input are one window of ~17 blocks;
  # a smaller block makes several windows (see test_several_windows...).
  values = dict(input_patterns=tuple(inputs), output_files=(), vocab_file=VOCAB_FILE,
                max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2,
                block_size_mb=0.01, num_workers=1)
  values.update(overrides)
  return cpd.DataConfig(**values)


def _shard_records(folder, compression=""):
  """{shard name: records} of every record file in folder."""
  return {n: list(writer_lib.iter_records(os.path.join(folder, n), compression))
          for n in sorted(os.listdir(folder)) if writer_lib.SHARD_PATTERN.match(n)}


def _all(shards):
  return sorted(r for records in shards.values() for r in records)


def _comparable_metadata(path):
  meta = record_schema.read_metadata(path)
  meta["flags"].pop("output_dir")
  meta["flags"].pop("beam_pipeline_options", None)
  meta["counts"].pop("output_files")
  meta["counts"].pop("instances_in_file")
  return meta


def _summary_lines(summary):
  return [line for line in cpd.format_summary(summary).splitlines()
          if not line.strip().startswith("time")]


def test_direct_runner_makes_the_local_modes_records(inputs, tmp_path, monkeypatch):
  from apache_beam.runners.portability import prism_runner  # pylint: disable=g-import-not-at-top
  prism_runs = []
  # Beam's DirectRunner would try Prism first (downloading it; offline it falls back).
  monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline",
                      lambda self, *args, **kwargs: prism_runs.append(args))
  local, beam = str(tmp_path / "local"), str(tmp_path / "beam")
  local_summary = cpd.run(_config(inputs, output_dir=local, num_output_shards=3))
  beam_summary = beam_pipeline.run(_config(inputs, output_dir=beam, num_output_shards=3),
                                   IN_MEMORY)
  assert not prism_runs
  local_shards, beam_shards = _shard_records(local), _shard_records(beam)
  assert list(local_shards) == list(beam_shards) == [
      f"pretraining-0000{i}-of-00003.tfrecord" for i in range(3)]
  # The same multiset of records, byte for byte (order and shards are the sink's).
  assert _all(beam_shards) == _all(local_shards)
  assert len(_all(local_shards)) == local_summary["instances"] > 1000
  assert len(set(_all(beam_shards))) == len(_all(beam_shards))  # no duplicate
  # The summary the command prints (but the time) and the metadata's counts are the same.
  assert _summary_lines(beam_summary) == _summary_lines(local_summary)
  for name, records in beam_shards.items():
    meta_path = os.path.join(beam, name + record_schema.METADATA_SUFFIX)
    meta = record_schema.read_metadata(meta_path)
    assert meta["counts"]["instances_in_file"] == len(records)
    assert meta["counts"]["output_files"] == [os.path.join(beam, n) for n in beam_shards]
    assert meta["flags"]["beam_pipeline_options"] == IN_MEMORY
    assert _comparable_metadata(meta_path) == _comparable_metadata(
        os.path.join(local, name + record_schema.METADATA_SUFFIX))
  counts = record_schema.read_metadata(meta_path)["counts"]
  assert counts["documents"] == local_summary["documents"]
  assert counts["input_files"] == 3 and counts["lines"] > 1500
  # Nothing else is left: no staging folder, no lock, no temporary.
  assert sorted(os.listdir(beam)) == sorted(
      list(beam_shards) + [n + record_schema.METADATA_SUFFIX for n in beam_shards])


def test_the_direct_runner_is_told_by_any_of_its_names():
  for name in ["DirectRunner", "directrunner", "direct", "SwitchingDirectRunner",
               "apache_beam.runners.direct.direct_runner.DirectRunner"]:
    assert beam_pipeline.is_direct_runner(name), name
  for name in [None, "", "PrismRunner", "BundleBasedDirectRunner", "FnApiRunner",
               "DataflowRunner", "TestDirectRunner", "directrunnerx"]:
    assert not beam_pipeline.is_direct_runner(name), name


@pytest.mark.slow
def test_several_windows_gzip_and_an_output_file_list(inputs, tmp_path):
  # Blocks of 800 bytes: windows of 51 kB, so the 182 kB of input are 4 windows, cut inside
  # files and across them.
  config = dict(block_size_mb=0.0008, compression="GZIP", dupe_factor=1)
  local = [str(tmp_path / f"local{i}.tfrecord.gz") for i in range(2)]
  beam = [str(tmp_path / "beam" / f"b{i}.tfrecord.gz") for i in range(2)]
  cpd.run(_config(inputs, output_files=tuple(local), **config))
  summary = beam_pipeline.run(_config(inputs, output_files=tuple(beam), **config), IN_MEMORY)
  assert summary["output_files"] == beam
  plan = I.plan_windows([os.path.getsize(p) for p in inputs], 800 * I.WINDOW_BLOCKS)
  assert len(plan) == 4
  ours = sorted(r for p in beam for r in writer_lib.iter_records(p, "GZIP"))
  assert ours == sorted(r for p in local for r in writer_lib.iter_records(p, "GZIP"))
  assert len(ours) == summary["instances"]
  meta = record_schema.read_metadata(beam[0] + record_schema.METADATA_SUFFIX)
  assert meta["compression"] == "GZIP"
  assert writer_lib.read_records(beam[1]) == list(writer_lib.iter_records(beam[1], "GZIP"))


@pytest.mark.slow
def test_two_worker_processes(inputs, tmp_path):
  local, beam = str(tmp_path / "local"), str(tmp_path / "beam")
  cpd.run(_config(inputs, output_dir=local, num_output_shards=2, num_workers=2))
  beam_pipeline.run(_config(inputs, output_dir=beam, num_output_shards=2),
                    ["--runner=DirectRunner", "--direct_num_workers=2",
                     "--direct_running_mode=multi_processing"])
  assert _all(_shard_records(beam)) == _all(_shard_records(local))


@pytest.mark.slow
def test_a_bundle_that_fails_once_is_retried_without_duplicates(inputs, tmp_path,
                                                                   monkeypatch):
  local, beam = str(tmp_path / "local"), str(tmp_path / "beam")
  config = dict(dupe_factor=1, block_size_mb=0.03, num_output_shards=2)
  cpd.run(_config(inputs, output_dir=local, **config))
  markers = tmp_path / "failed_once"
  markers.mkdir()
  monkeypatch.setenv(beam_pipeline.FAIL_ONCE_ENV, str(markers))
  # The first attempt at every block raises; the runner retries the bundle.
  summary = beam_pipeline.run(_config(inputs, output_dir=beam, **config),
                              ["--runner=BundleBasedDirectRunner"])
  failed = sorted(os.listdir(markers))
  assert len(failed) >= 2 and all(n.startswith("block-") for n in failed), failed
  records = _all(_shard_records(beam))
  assert records == _all(_shard_records(local))  # none lost, none twice
  assert len(records) == summary["instances"]
  # Every figure of the metadata is the local run's: the counts travel as pipeline data, so a
  # retried bundle's are dropped with its records (this runner's "committed" metrics keep the
  # failed attempts' increments: masked tokens came out 10,900 against 8,475 from them).
  for name in ("pretraining-00000-of-00002.tfrecord", "pretraining-00001-of-00002.tfrecord"):
    meta_name = name + record_schema.METADATA_SUFFIX
    assert _comparable_metadata(os.path.join(beam, meta_name)) == _comparable_metadata(
        os.path.join(local, meta_name))
  meta = record_schema.read_metadata(os.path.join(beam, "pretraining-00000-of-00002.tfrecord"
                                                  + record_schema.METADATA_SUFFIX))
  local_meta = record_schema.read_metadata(os.path.join(local, "pretraining-00000-of-00002.tfrecord"
                                                        + record_schema.METADATA_SUFFIX))
  assert meta["counts"]["instances"] == local_meta["counts"]["instances"] == len(records)
  assert [meta["counts"]["instances_in_file"], local_meta["counts"]["instances_in_file"]] == [
      len(r) for r in (_shard_records(beam)["pretraining-00000-of-00002.tfrecord"],
                       _shard_records(local)["pretraining-00000-of-00002.tfrecord"])]


@pytest.mark.slow
def test_a_failed_pipeline_leaves_nothing_that_looks_complete(inputs, tmp_path, monkeypatch):
  out = tmp_path / "out"
  markers = tmp_path / "markers"
  markers.mkdir()
  monkeypatch.setenv(beam_pipeline.FAIL_ONCE_ENV, str(markers))
  # The FnApiRunner does not retry: the injected failure fails the pipeline.
  with pytest.raises(Exception, match="injected failure"):
    beam_pipeline.run(_config(inputs, output_dir=str(out), num_output_shards=2),
                      ["--runner=FnApiRunner"])
  assert os.listdir(out) == []  # no shard, no metadata, no staging folder, no lock
  # The same command then works.
  monkeypatch.delenv(beam_pipeline.FAIL_ONCE_ENV)
  beam_pipeline.run(_config(inputs, output_dir=str(out), num_output_shards=2), IN_MEMORY)
  assert len(_shard_records(str(out))) == 2


@pytest.mark.slow
def test_a_rerun_is_refused_or_overwrites_as_the_local_mode(inputs, tmp_path):
  out = str(tmp_path / "out")
  config = dict(output_dir=out, num_output_shards=2, dupe_factor=1)
  beam_pipeline.run(_config(inputs, **config), IN_MEMORY)
  before = _shard_records(out)
  with pytest.raises(writer_lib.OutputError, match=r"--output_dir: .*pretraining-00000-of-00002"
                                                   r"\.tfrecord already exists.*--overwrite"):
    beam_pipeline.run(_config(inputs, **config), IN_MEMORY)
  assert _shard_records(out) == before
  # The local mode refuses Beam's output the same way, and --overwrite replaces it.
  with pytest.raises(writer_lib.OutputError, match="--overwrite"):
    cpd.run(_config(inputs, **config))
  beam_pipeline.run(_config(inputs, overwrite=True, random_seed=7, **config), IN_MEMORY)
  after = _shard_records(out)
  assert list(after) == list(before) and _all(after) != _all(before)
  # Another number of shards: the old layout is replaced in the same commit.
  beam_pipeline.run(_config(inputs, overwrite=True, **dict(config, num_output_shards=3)),
                    IN_MEMORY)
  assert list(_shard_records(out)) == [f"pretraining-0000{i}-of-00003.tfrecord"
                                       for i in range(3)]


@pytest.mark.slow
def test_fewer_instances_than_shards_writes_only_shards_with_records(tmp_path):
  small = tmp_path / "small.txt"
  small.write_text("".join(f"Sentence {i} of document {d}.\n" + ("\n" if i == 4 else "")
                           for d in range(2) for i in range(5)))
  out = str(tmp_path / "out")
  summary = beam_pipeline.run(_config([str(small)], output_dir=out, num_output_shards=50,
                                      dupe_factor=1), IN_MEMORY)
  shards = _shard_records(out)
  assert 0 < summary["instances"] < 50
  assert list(shards) == [f"pretraining-{i:05d}-of-{len(shards):05d}.tfrecord"
                          for i in range(len(shards))]
  assert all(shards.values()) and sum(map(len, shards.values())) == summary["instances"]


@pytest.mark.slow
def test_cli_passes_beam_flags_through(inputs, tmp_path, capsys):
  script = helpers.load_script("create_pretraining_data")
  out = tmp_path / "out"
  base = ["create_pretraining_data.py", f"--input_file={inputs[1]}", f"--output_dir={out}",
          f"--vocab_file={VOCAB_FILE}", "--max_seq_length=64", "--max_predictions_per_seq=10",
          "--dupe_factor=1", "--num_output_shards=2"]
  argv, beam_args = script.split_beam_args(
      base + ["--runner", "DirectRunner", "--direct_running_mode=in_memory", "--num_workers=3",
              "--nodo_lower_case"])
  assert beam_args == ["--runner", "DirectRunner", "--direct_running_mode=in_memory",
                       "--num_workers=3"]
  assert argv == base + ["--nodo_lower_case"]
  # Without --runner nothing is split off: an unknown flag stays a usage error.
  assert script.split_beam_args(base + ["--direct_num_workers=2"]) == (
      base + ["--direct_num_workers=2"], [])
  assert _run_cli(script, base + ["--direct_num_workers=2"]) == 2
  assert "direct_num_workers" in capsys.readouterr().err
  # A misspelt Beam option is refused, not dropped.
  assert _run_cli(script, base + ["--runner=DirectRunner", "--direct_num_workerz=2"]) == 2
  assert "unknown flag(s) --direct_num_workerz" in capsys.readouterr().err
  assert not out.exists() or os.listdir(out) == []
  assert _run_cli(script, base + IN_MEMORY) == 0
  printed = capsys.readouterr().out
  assert "Wrote " in printed and "random-next fraction" in printed
  assert "pipelined" in printed
  assert len(_shard_records(str(out))) == 2
  # --reproduce_original has no pipeline.
  assert _run_cli(script, base + IN_MEMORY + ["--reproduce_original", "--overwrite"]) == 2
  assert "--reproduce_original" in capsys.readouterr().err


def _run_cli(script, argv):
  """script.run_command on fresh flags (as helpers.run_cli_in_process); the exit code."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flag_values = flags.FlagValues()
  saved = script.FLAGS
  script.FLAGS = flag_values
  try:
    script.run_command(argv, flag_values)
  except SystemExit as e:
    return e.code
  finally:
    script.FLAGS = saved
    script.BEAM_ARGS[:] = []
  raise AssertionError("run_command returned instead of exiting")


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "2000"])
def test_block_size_mb_out_of_range_is_a_usage_error(tmp_path, capsys, value):
  script = helpers.load_script("create_pretraining_data")
  argv = ["create_pretraining_data.py", f"--input_file={ZH_INPUT}",
          f"--output_file={tmp_path}/o.tfrecord", f"--vocab_file={VOCAB_FILE}",
          f"--block_size_mb={value}"]
  assert helpers.run_cli_in_process(script, argv) == 2
  err = capsys.readouterr().err
  assert "--block_size_mb must be a number in (0, 1024]" in err and "Traceback" not in err
  assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_local_mode_does_not_import_apache_beam(tmp_path):
  code = ("import sys\n"
          f"sys.path.insert(0, {REPO_ROOT!r})\n"
          "import importlib.util\n"
          "spec = importlib.util.spec_from_file_location('cpd', "
          f"{os.path.join(REPO_ROOT, 'data_prep', 'create_pretraining_data.py')!r})\n"
          "script = importlib.util.module_from_spec(spec)\n"
          "spec.loader.exec_module(script)\n"
          "try:\n"
          f"  script.run_command(['x', '--input_file={ZH_INPUT}', "
          f"'--output_file={tmp_path}/o.tfrecord', '--vocab_file={VOCAB_FILE}', "
          "'--dupe_factor=1', '--max_seq_length=64', '--max_predictions_per_seq=10'])\n"
          "except SystemExit as e:\n"
          "  assert e.code == 0, e.code\n"
          "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
          "('apache_beam', 'tensorflow') or m == 'bert_tf.data.beam_pipeline')\n"
          "print('IMPORTED', heavy)\n")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=helpers.subprocess_env(), cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr[-2000:]
  assert "IMPORTED []" in result.stdout
  assert os.path.getsize(tmp_path / "o.tfrecord") > 0


# === The output folder lock (local and Beam) ===


def _hold_lock(folder):
  """A live process holding folder's lock, until killed."""
  code = ("import sys, time\n"
          f"sys.path.insert(0, {REPO_ROOT!r})\n"
          "from bert_tf import io\n"
          f"with io.directory_lock({folder!r}, 'create_pretraining_data'):\n"
          "  print('held', flush=True)\n"
          "  time.sleep(120)\n")
  proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
  assert proc.stdout.readline().strip() == "held"
  return proc


def test_a_second_run_on_a_locked_output_fails_at_once(inputs, tmp_path, capsys):
  out = tmp_path / "out"
  holder = _hold_lock(str(out))
  try:
    config = _config(inputs, output_dir=str(out), num_output_shards=2)
    for run in (cpd.run, lambda c: beam_pipeline.run(c, IN_MEMORY)):
      start = time.time()
      with pytest.raises(bert_io.DirectoryInUseError,
                         match=rf"--output_dir: {out} is in use by create_pretraining_data "
                               rf"\(pid {holder.pid} "):
        run(config)
      assert time.time() - start < 5
    # --output_file: the folder of each output is locked.
    script = helpers.load_script("create_pretraining_data")
    argv = ["create_pretraining_data.py", f"--input_file={ZH_INPUT}",
            f"--output_file={tmp_path}/free.tfrecord,{out}/o.tfrecord",
            f"--vocab_file={VOCAB_FILE}"]
    assert helpers.run_cli_in_process(script, argv) == 1
    err = capsys.readouterr().err
    assert f"--output_file: {out} is in use by" in err and err.count("\n") == 1
    assert os.listdir(out) == [bert_io.LOCK_NAME]
    assert not os.path.exists(tmp_path / "free.tfrecord")
  finally:
    holder.kill()
    holder.wait()
  # The holder is gone: its lock is taken over, and the lock file is never read as input.
  (out / "input.txt").write_text(open(ZH_INPUT, encoding="utf-8").read())
  summary = cpd.run(_config([str(out / "*")], output_files=(str(out / "o.tfrecord"),)))
  assert summary["instances"] > 0
  assert sorted(os.listdir(out)) == ["input.txt", "o.tfrecord", "o.tfrecord.metadata.json"]
  meta = record_schema.read_metadata(str(out / "o.tfrecord.metadata.json"))
  assert meta["counts"]["input_files"] == 1


# === The block plan ===


def test_plan_windows_cuts_the_stream_into_equal_slices():
  sizes = [0, 1000, 50, 0, 4000, 7]
  for window_bytes in (1, 100, 999, 1700, 5057, 10**9):
    plan = I.plan_windows(sizes, window_bytes)
    pieces = [p for window in plan for p in window]
    # Every byte of every file is in exactly one piece, in order.
    assert [(i, s, e) for i, s, e in pieces if s < e] == pieces
    for index, size in enumerate(sizes):
      mine = [(s, e) for i, s, e in pieces if i == index]
      assert [b for s, e in mine for b in range(s, e)] == list(range(size))
    totals = [sum(e - s for _, s, e in window) for window in plan]
    assert len(plan) == max(1, round(sum(sizes) / window_bytes))
    assert max(totals) - min(totals) <= 1
  assert I.plan_windows([0, 0], 10) == []


def test_byte_ranges_read_every_document_once(tmp_path):
  rng = random.Random(3)
  documents = []
  text = ""
  for d in range(60):
    lines = [f"doc {d} line {i} " + "x" * rng.randrange(0, 40)
             for i in range(rng.randint(1, 6))]
    documents.append([line.strip() for line in lines])
    # Separators of one or more blank lines, some with (Unicode) whitespace only.
    text += "\n".join(lines) + "\n" + rng.choice(["\n", "\n\n", "  \n", "\u3000\n\n"])
  path = tmp_path / "docs.txt"
  path.write_bytes(text.encode() + b"last document, no final newline")
  documents.append(["last document, no final newline"])
  size = os.path.getsize(path)
  for trial in range(40):
    cuts = sorted(rng.sample(range(1, size), rng.randint(1, 30)))
    bounds = [0] + cuts + [size]
    pieces = [(0, s, e) for s, e in zip(bounds, bounds[1:])]
    report = corpus.ReadReport()
    got = I.read_window([str(path)], pieces, "strict", report)
    assert got == documents, trial
    assert report.lines == text.count("\n") + 1 and report.bytes == size
    assert report.files == 1


def test_an_invalid_line_in_a_range_is_named_with_its_line_number(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_bytes(b"one\n\ntwo\nthree\n\n\xc3\x28 four\n")
  with pytest.raises(corpus.InputError, match=r"bad\.txt:6: invalid UTF-8"):
    I.read_window([str(path)], [(0, 0, 8), (0, 8, 30)], "strict", corpus.ReadReport())


def test_the_workers_log_warnings_only_unless_verbose(tmp_path, monkeypatch):
  """Beam's workers get --default_sdk_harness_log_level=WARNING at the default verbosity,
  unless the command line gives a level; -v 1 leaves them theirs."""
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  given = []

  def stop(args):
    given.append(list(args))
    raise RuntimeError("stop here")

  monkeypatch.setattr(beam_pipeline, "pipeline_options", stop)
  config = _config([os.path.join(TEST_DATA, "cpd_austen_100k.txt")],
                   output_dir=str(tmp_path / "out"))
  level = "--default_sdk_harness_log_level"
  verbosity = absl_logging.get_verbosity()
  try:
    for args, verbose in ((IN_MEMORY, False), (IN_MEMORY + [f"{level}=DEBUG"], False),
                          (IN_MEMORY, True)):
      absl_logging.set_verbosity(absl_logging.DEBUG if verbose else absl_logging.INFO)
      with pytest.raises(RuntimeError, match="stop here"):
        beam_pipeline.run(config, args)
  finally:
    absl_logging.set_verbosity(verbosity)
  quiet = ("--sdk_harness_log_level_overrides=" + json.dumps(
      {name: "CRITICAL" for name in beam_pipeline._FAILURE_LOGGERS}))  # pylint: disable=protected-access
  assert given == [IN_MEMORY + [f"{level}=WARNING", quiet],
                   IN_MEMORY + [f"{level}=DEBUG"], IN_MEMORY]


def test_a_workers_error_of_ours_is_raised_as_itself():
  """The multi-process DirectRunner (and Dataflow) wrap a worker's InputError in a RuntimeError
  holding the worker's traceback: the command reports the InputError's one line."""
  wrapped = RuntimeError(
      "Pipeline job_1 failed in state FAILED: Traceback (most recent call last):\n"
      "  File \"x.py\", line 1, in process\n"
      "bert_tf.data.corpus.InputError: in/bad.txt:2: invalid UTF-8 at byte 0 of the line "
      "(b'\\xff'); pass --errors=replace or --errors=skip to accept such lines "
      "[while running 'ReadWindows/ParDo(_ReadWindows)']\n")
  error = beam_pipeline.worker_error(wrapped)
  assert isinstance(error, corpus.InputError)
  assert str(error) == ("in/bad.txt:2: invalid UTF-8 at byte 0 of the line (b'\\xff'); pass "
                        "--errors=replace or --errors=skip to accept such lines")
  assert beam_pipeline.worker_error(RuntimeError("the runner lost a worker")) is None
