"""Reliability of data_prep/create_pretraining_data.py: no empty shards, a crash-safe commit,
full disks, clashing output names, concurrent temporaries, huge lines, damaged length headers.

Small local corpora and in-process runs; the kills mid-commit run in subprocesses (no
TensorFlow import there: local data prep never loads it).
"""

import errno
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from bert_tf import io as io_lib
from bert_tf import record_schema
from bert_tf.data import pretraining_data as cpd
from bert_tf.data import writer as writer_lib

from tests import helpers
from tests.helpers import REPO_ROOT, TEST_DATA

VOCAB_FILE = os.path.join(TEST_DATA, "vocab_uncased.txt")
AUSTEN = os.path.join(TEST_DATA, "cpd_austen_100k.txt")


def _corpus(path, num_bytes=12000):
  """The first num_bytes of the Austen sample, cut at a line end, in documents of 8 lines."""
  lines = open(AUSTEN, encoding="utf-8").read()[:num_bytes].splitlines()[:-1]
  lines = [line for line in lines if line.strip()]
  text = "".join(line + "\n" + ("\n" if i % 8 == 7 else "") for i, line in enumerate(lines))
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


def _config(inputs, outputs=(), **overrides):
  values = dict(input_patterns=tuple(inputs), output_files=tuple(outputs),
                vocab_file=VOCAB_FILE, max_seq_length=64, max_predictions_per_seq=10,
                dupe_factor=1, num_workers=1)
  values.update(overrides)
  return cpd.DataConfig(**values)


def _files(folder):
  """{name: bytes} of every file in folder."""
  return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))}


def _without_run_specific(files):
  """The files with the metadata's recorded flags made comparable across output folders."""
  out = {}
  for name, data in files.items():
    if name.endswith(record_schema.METADATA_SUFFIX):
      meta = json.loads(data)
      for flag in ("output_dir", "num_output_shards", "overwrite"):
        meta["flags"].pop(flag)
      meta["counts"]["output_files"] = [os.path.basename(p) for p in
                                        meta["counts"]["output_files"]]
      meta["counts"].pop("outputs_not_written", None)
      data = json.dumps(meta, sort_keys=True).encode()
    out[name] = data
  return out


# === 1. No empty record files ===


@pytest.mark.parametrize("reproduce_original", [True, False])
def test_more_shards_than_instances_writes_only_shards_with_records(tmp_path, caplog,
                                                                    reproduce_original):
  corpus = _corpus(tmp_path / "small.txt", 3000)
  exact = cpd.run(_config([corpus], reproduce_original=reproduce_original,
                          output_dir=str(tmp_path / "probe")))
  instances = exact["instances"]
  assert 2 < instances < 16, instances
  requested = 16
  shards = tmp_path / "shards"
  with caplog.at_level(logging.WARNING):
    summary = cpd.run(_config([corpus], reproduce_original=reproduce_original,
                              output_dir=str(shards), num_output_shards=requested))
  names = [f"pretraining-{i:05d}-of-{instances:05d}.tfrecord" for i in range(instances)]
  assert sorted(os.listdir(shards)) == sorted(names + [n + ".metadata.json" for n in names])
  assert all(os.path.getsize(shards / n) > 0 for n in names)
  assert summary["output_files"] == [f"{shards}/{n}" for n in names]
  assert f"{instances} instance(s) for {requested} output files: writing only {instances}" in (
      caplog.text)
  meta = record_schema.read_metadata(f"{shards}/{names[0]}.metadata.json")
  assert meta["flags"]["num_output_shards"] == requested
  assert meta["counts"]["instances_in_file"] == 1
  assert meta["counts"]["output_files"] == summary["output_files"]
  assert meta["counts"]["outputs_not_written"] == [
      f"{shards}/pretraining-{i:05d}-of-{requested:05d}.tfrecord"
      for i in range(instances, requested)]
  # The same files, record for record, as a run asking for exactly that many shards.
  again = tmp_path / "exact"
  cpd.run(_config([corpus], reproduce_original=reproduce_original, output_dir=str(again),
                  num_output_shards=instances))
  assert _without_run_specific(_files(shards)) == _without_run_specific(_files(again))

  # An --output_file list: the first files get the records; the others are not created, and
  # an empty file of such a name (which training would spin on) is removed.
  listed = [str(tmp_path / f"l{i}.tfrecord") for i in range(instances + 2)]
  open(listed[-1], "wb").close()
  cpd.run(_config([corpus], listed, reproduce_original=reproduce_original))
  for i, path in enumerate(listed):
    assert os.path.exists(path) == (i < instances), path
    assert os.path.exists(path + ".metadata.json") == (i < instances), path
  for i in range(instances):
    assert open(listed[i], "rb").read() == _files(again)[names[i]]


# === 2. A kill at any point of the commit ===


def _killed_run(config, kill_at, marker):
  """Runs cpd.run(config) in a subprocess that dies (os._exit) at the kill_at-th commit step.

  kill_at: ("rename", n) dies instead of the n-th rename; ("journal_removed", 0) dies right
  before the journal is deleted (every rename done).
  """
  kind, n = kill_at
  code = textwrap.dedent(f"""
      import os, sys
      sys.path.insert(0, {REPO_ROOT!r})
      from bert_tf import io
      from bert_tf.data import pretraining_data as cpd
      calls = [0]
      rename, remove = io.rename, io.remove
      def dying_rename(src, dst, overwrite=True):
        calls[0] += 1
        if {kind!r} == "rename" and calls[0] == {n}:
          open({marker!r}, "w").close()
          os._exit(17)
        rename(src, dst, overwrite)
      def dying_remove(path):
        if {kind!r} == "journal_removed" and path.endswith(".commit"):
          open({marker!r}, "w").close()
          os._exit(17)
        remove(path)
      io.rename, io.remove = dying_rename, dying_remove
      cpd.run(cpd.DataConfig(**{config!r}))
      """)
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=helpers.subprocess_env())
  assert result.returncode == 17 and os.path.exists(marker), result.stderr[-2000:]
  os.remove(marker)


@pytest.fixture(scope="module")
def commit_case(tmp_path_factory):
  """A corpus, the flags of a 3-shard run, and an uninterrupted run's files."""
  base = tmp_path_factory.mktemp("commit")
  corpus = _corpus(base / "corpus.txt", 6000)
  values = dict(input_patterns=(corpus,), output_files=(), vocab_file=VOCAB_FILE,
                max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1, num_workers=1,
                num_output_shards=3)
  reference = base / "reference"
  cpd.run(cpd.DataConfig(output_dir=str(reference), **values))
  return base, values, _without_run_specific(_files(reference))


# 3 record renames, then 3 metadata renames; and after the last rename.
@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [("rename", 1), ("rename", 2), ("rename", 5),
                                     ("journal_removed", 0)])
def test_a_kill_mid_commit_is_rolled_back_by_the_rerun(commit_case, kill_at, tmp_path):
  base, values, reference = commit_case
  out = tmp_path / "out"
  config = dict(values, output_dir=str(out))
  _killed_run(config, kill_at, str(tmp_path / "killed"))
  left = os.listdir(out)
  journals = [n for n in left if n.endswith(".commit")]
  assert len(journals) == 1, left  # the unfinished commit is marked as such
  # The rerun with the same flags (no --overwrite) rolls the commit back and writes the data.
  cpd.run(cpd.DataConfig(**config))
  assert _without_run_specific(_files(out)) == reference


@pytest.mark.slow
def test_a_kill_mid_commit_over_older_outputs_is_recovered_with_the_same_flags(commit_case,
                                                                                tmp_path):
  base, values, reference = commit_case
  out = tmp_path / "out"
  # Older data of another seed is being replaced (--overwrite) when the kill comes.
  cpd.run(cpd.DataConfig(**dict(values, output_dir=str(out), random_seed=7)))
  config = dict(values, output_dir=str(out), overwrite=True)
  _killed_run(config, ("rename", 2), str(tmp_path / "killed"))
  assert [n for n in os.listdir(out) if n.endswith(".commit")]  # marked as unfinished
  cpd.run(cpd.DataConfig(**config))
  assert _without_run_specific(_files(out)) == reference


def test_a_failed_commit_rolls_back_in_process(commit_case, tmp_path, monkeypatch):
  base, values, reference = commit_case
  out = tmp_path / "out"
  config = cpd.DataConfig(**dict(values, output_dir=str(out)))
  rename = io_lib.rename
  calls = []

  def failing_rename(src, dst, overwrite=True):
    calls.append(dst)
    if len(calls) == 3:
      raise OSError(errno.EIO, "Input/output error")
    rename(src, dst, overwrite)
  monkeypatch.setattr(io_lib, "rename", failing_rename)
  with pytest.raises(writer_lib.OutputError, match=r"--output_dir: committing .*pretraining-"
                                                   r"00000-of-00003\.tfrecord and 2 more "
                                                   r"failed: .*Input/output error"):
    cpd.run(config)
  assert os.listdir(out) == []  # no record file without metadata, no temporary
  monkeypatch.setattr(io_lib, "rename", rename)
  cpd.run(config)
  assert _without_run_specific(_files(out)) == reference


def test_a_live_runs_commit_is_not_touched(commit_case, tmp_path):
  base, values, _ = commit_case
  out = tmp_path / "out"
  out.mkdir()
  # A journal of a process that is alive (our parent): its commit may be running now.
  journal = out / f"pretraining-00000-of-00003.tfrecord.incomplete-{os.getppid()}.commit"
  journal.write_text(json.dumps({"format": writer_lib.JOURNAL_FORMAT, "pid": os.getppid(),
                                 "host": __import__("socket").gethostname(),
                                 "outputs": [], "temps": []}))
  with pytest.raises(writer_lib.OutputError, match=rf"{journal}: run {os.getppid()} is "
                                                   r"committing to these outputs right now"):
    cpd.run(cpd.DataConfig(**dict(values, output_dir=str(out))))
  assert os.listdir(out) == [journal.name]


# === 3. A full disk while the metadata is written ===


class _FullDiskFile:
  """A text file whose writes fail as on a full disk."""

  def __init__(self, real):
    self._real = real

  def write(self, _):
    raise OSError(errno.ENOSPC, "No space left on device")

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self._real.close()
    return False

  def close(self):
    self._real.close()


def test_full_disk_while_writing_metadata_commits_nothing(tmp_path, monkeypatch, capsys):
  corpus = _corpus(tmp_path / "corpus.txt", 4000)
  out = tmp_path / "out"
  out.mkdir()
  old = str(out / "data.tfrecord")
  cpd.run(_config([corpus], [old], random_seed=3))
  before = _files(out)

  def open_on_full_disk(path, mode="r", **kwargs):
    real = open(path, mode, **kwargs)  # pylint: disable=unspecified-encoding
    return _FullDiskFile(real) if ".metadata.json" in path and "w" in mode else real
  monkeypatch.setattr(io_lib, "open", open_on_full_disk, raising=False)
  script = helpers.load_script("create_pretraining_data")
  capsys.readouterr()
  code = helpers.run_cli_in_process(script, [
      "create_pretraining_data.py", f"--input_file={corpus}", f"--output_file={old}",
      f"--vocab_file={VOCAB_FILE}", "--max_seq_length=64", "--max_predictions_per_seq=10",
      "--dupe_factor=1", "--num_workers=1", "--overwrite"])
  err = capsys.readouterr().err
  assert code == 1, err
  assert err.count("\n") == 1 and f"cannot write {old}.metadata.json" in err, err
  assert "No space left on device" in err
  # The previous output is as it was: no new records without metadata, no 0-byte temporary.
  assert _files(out) == before


def test_full_disk_while_writing_records_names_the_output(tmp_path, monkeypatch):
  corpus = _corpus(tmp_path / "corpus.txt", 4000)
  out = str(tmp_path / "o.tfrecord")

  def full_disk(self):
    raise OSError(errno.ENOSPC, "No space left on device")
  monkeypatch.setattr(writer_lib._LocalRecordFile, "_flush", full_disk)  # pylint: disable=protected-access
  with pytest.raises(writer_lib.OutputError,
                     match=rf"--output_file: cannot write {out}: .*No space left on device"):
    cpd.run(_config([corpus], [out]))
  assert os.listdir(tmp_path) == ["corpus.txt"]


# === 4. One output under two names ===


def test_one_output_under_two_names_is_refused(tmp_path):
  corpus = _corpus(tmp_path / "corpus.txt", 3000)
  a = str(tmp_path / "a.tfrecord")
  spelled = str(tmp_path / "." / "sub" / ".." / "a.tfrecord")
  os.mkdir(tmp_path / "sub")
  with pytest.raises(writer_lib.OutputError,
                     match=rf"--output_file: {a} and {spelled} are the same file"):
    cpd.run(_config([corpus], [a, spelled]))
  os.symlink(tmp_path, tmp_path / "link")
  linked = str(tmp_path / "link" / "a.tfrecord")
  with pytest.raises(writer_lib.OutputError, match=rf"{a} and {linked} are the same file"):
    cpd.run(_config([corpus], [a, linked]))
  meta = a + ".metadata.json"
  with pytest.raises(writer_lib.OutputError,
                     match=rf"--output_file: {meta} is the metadata file of {a}"):
    cpd.run(_config([corpus], [meta, "x.tfrecord", a]))
  # The input named as the output (or as its metadata file) would be replaced: refused.
  text = open(corpus, encoding="utf-8").read()
  with pytest.raises(writer_lib.OutputError,
                     match=rf"--output_file: {corpus} is the input file {corpus} "):
    cpd.run(_config([corpus], [corpus], overwrite=True))
  named = str(tmp_path / "sub" / "out.metadata.json")
  with open(named, "w", encoding="utf-8") as f:
    f.write(text)
  with pytest.raises(writer_lib.OutputError, match=rf"{named} is the input file {named} "):
    cpd.run(_config([named], [str(tmp_path / "sub" / "out")], overwrite=True))
  assert open(corpus, encoding="utf-8").read() == text
  assert open(named, encoding="utf-8").read() == text
  os.remove(named)
  assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "link", "sub"]


# === 5. Temporary names are per process ===


def test_temporary_names_are_per_process(tmp_path, monkeypatch):
  corpus = _corpus(tmp_path / "corpus.txt", 3000)
  out = str(tmp_path / "o.tfrecord")
  # Another run's temporaries (a live process: our parent) and an old fixed-name temporary.
  others = {f"{out}.metadata.json.incomplete-{os.getppid()}": b"another run's metadata",
            f"{out}.incomplete-{os.getppid()}": b"another run's records",
            f"{out}.metadata.json.tmp": b"old"}
  for path, data in others.items():
    with open(path, "wb") as f:
      f.write(data)
  opened = []
  real_open = open

  def recording_open(path, mode="r", **kwargs):
    if "w" in mode:
      opened.append(path)
    return real_open(path, mode, **kwargs)  # pylint: disable=unspecified-encoding
  monkeypatch.setattr(io_lib, "open", recording_open, raising=False)
  cpd.run(_config([corpus], [out]))
  assert opened and all(f".incomplete-{os.getpid()}" in p for p in opened), opened
  assert f"{out}.metadata.json.incomplete-{os.getpid()}" in opened
  for path, data in others.items():
    assert open(path, "rb").read() == data
  assert record_schema.read_metadata(out + ".metadata.json")["counts"]["instances"] > 0


# === 6. Huge lines ===


@pytest.mark.parametrize("reproduce_original", [True, False])
def test_a_huge_line_is_warned_about_with_file_and_line(tmp_path, caplog, reproduce_original):
  first = _corpus(tmp_path / "first.txt", 3000)
  second = tmp_path / "second.txt"
  huge = "word " * 6000  # 30,000 bytes; the limit is 4 * 100 * 64 = 25,600
  second.write_text("A short line.\nAnother one.\n\n" + huge + "\nThe end.\n")
  ok = "word " * 5000  # 25,000 bytes: not warned about
  third = tmp_path / "third.txt"
  third.write_text(ok + "\n")
  out = str(tmp_path / "o.tfrecord")
  with caplog.at_level(logging.WARNING):
    cpd.run(_config([first, str(second), str(third)], [out],
                    reproduce_original=reproduce_original))
  assert f"{second}:4: a line of 30001 bytes (over 25600)" in caplog.text
  assert "third.txt" not in caplog.text and caplog.text.count("a line of") == 1
  assert record_schema.read_metadata(out + ".metadata.json")["counts"]["long_lines"] == 1


def test_the_default_mode_tokenizes_only_the_beginning_of_a_huge_line(tmp_path):
  """Memory stays bounded: a 20 MB line took ~20x its size to tokenize whole (probe item 12);
  the algorithm uses about max_seq_length tokens of it anyway."""
  maker = cpd.BlockMaker(_config([AUSTEN], [str(tmp_path / "o.tfrecord")]))
  lengths = []
  tokenize = maker.tokenize
  maker.tokenize = lambda line: lengths.append(len(line)) or tokenize(line)
  huge = "word " * 100_000  # 500,000 characters
  result = maker((0, 0), [["A short line.", huge, "The end."],
                          ["Another document.", "With a second line."]])
  assert sorted(lengths) == [8, 13, 17, 19, 4 * 100 * 64]  # "The end." ... the clipped line
  assert result.records and result.stats.instances == len(result.records)


# === 7. A damaged length header ===


def test_a_damaged_length_header_is_named_before_the_body_is_read(tmp_path):
  records = [b"record %d " % i * (i + 1) for i in range(6)]
  data = bytearray(writer_lib.frame_records(records))
  offsets = [0]
  for r in records:
    offsets.append(offsets[-1] + 16 + len(r))
  data[offsets[3] + 6] ^= 0x01  # record 3's length, now ~2^48: far past the end of the file
  path = tmp_path / "d.tfrecord"
  path.write_bytes(bytes(data))
  read = []
  with pytest.raises(writer_lib.CorruptRecordError) as e:
    for record in writer_lib.iter_records(str(path)):
      read.append(record)
  assert str(e.value) == f"{path}: record 3 at byte {offsets[3]}: length checksum mismatch"
  assert read == records[:3]
  # Damage within the file's size is caught the same way (not as a data checksum mismatch).
  data[offsets[3] + 6] ^= 0x01
  data[offsets[3]] ^= 0x01
  path.write_bytes(bytes(data))
  with pytest.raises(writer_lib.CorruptRecordError,
                     match=rf"record 3 at byte {offsets[3]}: length checksum mismatch"):
    list(writer_lib.iter_records(str(path)))
  # The first header: most likely not a TFRecord file at all.
  text = tmp_path / "t.txt"
  text.write_text("plain text, no records\n" * 10)
  with pytest.raises(writer_lib.CorruptRecordError,
                     match=r"record 0 at byte 0: not a TFRecord file"):
    list(writer_lib.iter_records(str(text)))
