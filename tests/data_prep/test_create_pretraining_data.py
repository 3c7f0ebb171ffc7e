"""End-to-end tests of data_prep/create_pretraining_data.py and its library half
(bert_tf/data/pretraining_data.py, writer.py).

The CLI test runs the real command in a subprocess on the committed Chinese golden input and
checks its records against the original script's output (tests/data/cpd_zh_s64_d1.tfrecord).
The other tests call `run()` in-process (ram:// paths) to keep the suite fast.
"""

import dataclasses
import hashlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from bert_tf import io as bert_io
from bert_tf import record_schema
from bert_tf.data import corpus
from bert_tf import cli
from bert_tf.data import pretraining_data as cpd
from bert_tf.data import writer as writer_lib

from tests import helpers
from tests.helpers import REPO_ROOT, TEST_DATA

VOCAB_FILE = os.path.join(TEST_DATA, "vocab_uncased.txt")
ZH_INPUT = os.path.join(TEST_DATA, "cpd_zh_60k.txt")
ZH_GOLDEN = os.path.join(TEST_DATA, "cpd_zh_s64_d1.tfrecord")
ZH_MD5 = "a82b0171fbdba8ca0c1b4bcfa07c0e09"
ZH_FLAGS = dict(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1)


def _ram_dir():
  path = f"ram://cpd_test_{random.getrandbits(48)}"
  tf.io.gfile.makedirs(path)
  return path


def _records(path, compression=""):
  return [bytes(r) for r in tf.data.TFRecordDataset(path, compression_type=compression)
          .as_numpy_iterator()]


def _content_md5(records):
  digest = hashlib.md5()
  for r in records:
    digest.update(tf.train.Example.FromString(r).SerializeToString(deterministic=True))
  return digest.hexdigest()


def _config(outputs, inputs=(ZH_INPUT,), **overrides):
  values = dict(input_patterns=tuple(inputs), output_files=tuple(outputs),
                vocab_file=VOCAB_FILE, reproduce_original=True, **ZH_FLAGS)
  values.update(overrides)
  return cpd.DataConfig(**values)


def _write_text(path, data: bytes):
  with tf.io.gfile.GFile(path, "wb") as f:
    f.write(data)
  return path


@pytest.mark.slow
def test_cli_reproduces_the_original(tmp_path):
  out = tmp_path / "zh.tfrecord"
  cmd = [sys.executable, os.path.join(REPO_ROOT, "data_prep", "create_pretraining_data.py"),
         f"--input_file={ZH_INPUT}", f"--output_file={out}", f"--vocab_file={VOCAB_FILE}",
         "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=1",
         "--random_seed=12345", "--reproduce_original"]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(tmp_path),
                          timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  ours = _records(str(out))
  golden = _records(ZH_GOLDEN)
  assert len(ours) == len(golden) == 345
  for i, (a, b) in enumerate(zip(ours, golden)):
    assert tf.train.Example.FromString(a) == tf.train.Example.FromString(b), f"record {i}"
  # Our bytes are the deterministic serialisation itself, so the file hashes to the content md5.
  assert hashlib.md5(b"".join(ours)).hexdigest() == ZH_MD5
  assert "instances             345" in result.stdout
  assert "random-next fraction" in result.stdout
  meta = record_schema.read_metadata(str(out) + ".metadata.json")
  assert meta["counts"]["instances"] == 345
  assert meta["counts"]["instances_in_file"] == 345
  assert meta["max_seq_length"] == 64 and meta["max_predictions_per_seq"] == 10
  assert meta["vocab_size"] == 30522
  assert meta["vocab_md5"] == "64800d5d8528ce344256daf115d4965e"
  assert meta["do_lower_case"] is True
  assert meta["flags"]["random_seed"] == 12345
  assert sorted(os.listdir(tmp_path)) == ["zh.tfrecord", "zh.tfrecord.metadata.json"]


def test_cli_exit_codes_and_one_line_errors(tmp_path, capsys):
  # In-process (a subprocess would spend seconds on imports): flags -> main -> exit status.
  script = helpers.load_script("create_pretraining_data")
  argv = ["create_pretraining_data.py", f"--input_file={tmp_path}/nothing*.txt",
          f"--output_file={tmp_path}/o.tfrecord", f"--vocab_file={VOCAB_FILE}", "--gzip"]
  # A missing input is a failure (1) naming the flag and the pattern, in one line.
  assert helpers.run_cli_in_process(script, argv) == 1
  err = capsys.readouterr().err
  assert "--input_file: no file matches" in err and "Traceback" not in err
  assert err.count("\n") == 1
  # Usage errors (2): a missing required flag, an unknown flag, a value out of range.
  assert helpers.run_cli_in_process(script, argv[:1]) == 2
  assert "--input_file is required" in capsys.readouterr().err
  assert helpers.run_cli_in_process(script, argv + ["--no_such_flag=1"]) == 2
  assert "no_such_flag" in capsys.readouterr().err
  assert helpers.run_cli_in_process(script, argv[:4] + [f"--input_file={ZH_INPUT}",
                                                        "--masked_lm_prob=0"]) == 2
  assert "--masked_lm_prob must be in (0, 1]" in capsys.readouterr().err
  assert os.listdir(tmp_path) == []


# The original script's outputs on tests/data/cpd_adversarial.txt (Unicode edge cases, control
# characters, CRLF, carriage returns inside lines and old Mac line ends; tests/data/README.md),
# with the bert-base-uncased vocab and seed 12345 unless given: (flags, instances, content md5).
ADVERSARIAL_GOLDEN = [
    (dict(max_seq_length=128, max_predictions_per_seq=20, dupe_factor=2),
     61, "f40d1c7db30bf2da3b822b47890740ef"),
    (dict(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=3, do_whole_word_mask=True,
          random_seed=7, masked_lm_prob=0.2, short_seq_prob=0.3),
     155, "cc9b2a0934b056f66af7814e8fa6868f"),
    (dict(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1, do_lower_case=False),
     42, "f7ae0a2612c1c3ac801e199915fe5fb3"),
]


@pytest.mark.parametrize("flags, instances, md5", ADVERSARIAL_GOLDEN)
def test_adversarial_text_gives_the_originals_records(flags, instances, md5, caplog):
  """Every "\\r" is deleted as the original's reader (TensorFlow's readline) deletes it, so
  "line\\rwith" is one word, as there; the lines where that joins text are warned about."""
  out = f"{_ram_dir()}/adversarial.tfrecord"
  with caplog.at_level(logging.WARNING):
    summary = cpd.run(_config([out], inputs=[os.path.join(TEST_DATA, "cpd_adversarial.txt")],
                              **flags))
  records = _records(out)
  assert summary["instances"] == len(records) == instances
  assert _content_md5(records) == md5
  assert "2 line(s) hold a carriage return (\\r) inside their text" in caplog.text


def test_round_robin_gzip_v2_and_stable_bytes():
  base = _ram_dir()
  single = f"{base}/all.tfrecord"
  summary = cpd.run(_config([single]))
  assert summary["instances"] == 345
  everything = _records(single)
  assert hashlib.md5(b"".join(everything)).hexdigest() == ZH_MD5
  # Same flags again: the same bytes (the original's vary from run to run).
  again = f"{base}/again.tfrecord"
  cpd.run(_config([again]))
  assert _records(again) == everything

  shards = [f"{base}/s0.tfrecord.gz", f"{base}/s1.tfrecord.gz"]
  cpd.run(_config(shards, compression="GZIP"))
  assert _records(shards[0], "GZIP") == everything[0::2]
  assert _records(shards[1], "GZIP") == everything[1::2]
  meta = record_schema.read_metadata(record_schema.metadata_path(shards[1]))
  assert meta["compression"] == "GZIP"
  assert meta["counts"]["instances_in_file"] == 172
  assert meta["counts"]["output_files"] == shards
  assert writer_lib.read_records(shards[0]) == everything[0::2]  # compression from metadata

  v2 = f"{base}/v2.tfrecord"
  cpd.run(_config([v2], use_v2_feature_names=True))
  first_v1 = record_schema.decode_example(everything[0], 64, 10)
  first_v2 = record_schema.decode_example(_records(v2)[0], 64, 10, use_v2_feature_names=True)
  assert first_v1 == first_v2
  assert record_schema.read_metadata(record_schema.metadata_path(v2))["features"][0]["name"] == (
      "input_word_ids")


def test_summary_figures():
  out = f"{_ram_dir()}/o.tfrecord"
  summary = cpd.run(_config([out]))
  decoded = [record_schema.decode_example(r, 64, 10) for r in _records(out)]
  lengths = [sum(d["input_mask"]) for d in decoded]
  assert summary["mean_length"] == pytest.approx(sum(lengths) / len(lengths))
  assert summary["full_length_fraction"] == pytest.approx(
      sum(n == 64 for n in lengths) / len(lengths))
  assert summary["mean_masked_tokens"] == pytest.approx(
      sum(sum(d["masked_lm_weights"]) for d in decoded) / len(decoded))
  assert summary["random_next_fraction"] == pytest.approx(
      sum(d["next_sentence_labels"][0] for d in decoded) / len(decoded))
  assert summary["output_bytes"] == tf.io.gfile.stat(out).length
  text = cpd.format_summary(summary)
  assert "full-length fraction" in text and "instances/s" in text


def test_existing_output_needs_overwrite():
  out = f"{_ram_dir()}/o.tfrecord"
  _write_text(out, b"not empty")
  with pytest.raises(writer_lib.OutputError, match=r"o\.tfrecord already exists.*--overwrite"):
    cpd.run(_config([out]))
  with tf.io.gfile.GFile(out, "rb") as f:
    assert f.read() == b"not empty"  # untouched
  cpd.run(_config([out], overwrite=True))
  assert len(_records(out)) == 345
  # An existing empty file (e.g. from `touch`) is not data: no --overwrite needed.
  empty = f"{_ram_dir()}/e.tfrecord"
  _write_text(empty, b"")
  cpd.run(_config([empty]))
  assert len(_records(empty)) == 345


def test_failed_run_leaves_no_output(monkeypatch):
  base = _ram_dir()
  out = f"{base}/o.tfrecord"
  real_write = writer_lib.RecordWriter.write

  def write_then_die(self, record):
    if sum(self.counts) == 100:
      raise KeyboardInterrupt  # as if killed half way
    real_write(self, record)
  monkeypatch.setattr(writer_lib.RecordWriter, "write", write_then_die)
  with pytest.raises(KeyboardInterrupt):
    cpd.run(_config([out, f"{base}/o2.tfrecord"]))
  assert tf.io.gfile.listdir(base) == []


def test_overwrite_replaces_stale_metadata(tmp_path):
  out = str(tmp_path / "o.tfrecord")
  cpd.run(_config([out], max_seq_length=32, max_predictions_per_seq=5))
  cpd.run(_config([out], overwrite=True))
  assert record_schema.read_metadata(out + ".metadata.json")["max_seq_length"] == 64
  assert record_schema.decode_example(_records(out)[0], 64, 10)


def test_writer_round_robin_and_abort():
  base = _ram_dir()
  paths = [f"{base}/a", f"{base}/b", f"{base}/c"]
  with writer_lib.RecordWriter(paths) as writer:
    for i in range(7):
      writer.write(b"r%d" % i)
    assert sorted(tf.io.gfile.listdir(base)) == sorted(
        os.path.basename(p) + f".incomplete-{os.getpid()}" for p in paths)
    sizes = writer.commit()
  assert writer.counts == [3, 2, 2]
  assert [_records(p) for p in paths] == [[b"r0", b"r3", b"r6"], [b"r1", b"r4"], [b"r2", b"r5"]]
  assert sizes == [tf.io.gfile.stat(p).length for p in paths]
  other = _ram_dir()
  with pytest.raises(ValueError):
    with writer_lib.RecordWriter([f"{other}/x"]) as writer:
      writer.write(b"partial")
      raise ValueError("stop")
  assert tf.io.gfile.listdir(other) == []


@pytest.mark.parametrize("overrides, error, message", [
    (dict(masked_lm_prob=0.0), cpd.UsageError, r"--masked_lm_prob must be in \(0, 1\]"),
    (dict(masked_lm_prob=1.01), cpd.UsageError, "--masked_lm_prob"),
    (dict(max_seq_length=600), cpd.UsageError, "--max_seq_length must be between 5 and 512"),
    (dict(max_seq_length=3), cpd.UsageError, "--max_seq_length"),
    (dict(max_predictions_per_seq=62), cpd.UsageError,
     "--max_predictions_per_seq=62 is larger than possible"),
    (dict(errors="ignore"), cpd.UsageError, "--errors must be one of"),
    (dict(input_patterns=("/nonexistent/dir/*.txt",)), corpus.InputError,
     r"--input_file: no file matches '/nonexistent/dir/\*\.txt'"),
    (dict(vocab_file="/nonexistent/vocab.txt"), cpd.UsageError,
     "--vocab_file: Vocab file not found"),
])
def test_bad_flags_name_the_flag(overrides, error, message):
  out = f"{_ram_dir()}/o.tfrecord"
  with pytest.raises(error, match=message):
    cpd.run(_config([out], **overrides))


def test_vocab_without_special_tokens(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\nhello\n")
  with pytest.raises(cpd.UsageError, match=r"--vocab_file: .*vocab\.txt.*\[CLS\]"):
    cpd.run(_config([f"{_ram_dir()}/o"], vocab_file=str(vocab)))


def test_a_blank_vocab_line_is_warned_about(tmp_path, caplog):
  """A blank line is the token "" (the original's reading too), which masking can draw as a
  random replacement: the warning names the line and the vocab_size the data then needs."""
  vocab = tmp_path / "vocab.txt"
  with open(VOCAB_FILE, encoding="utf-8") as f:
    vocab.write_text(f.read() + "\n", encoding="utf-8")
  with caplog.at_level("WARNING"):
    cpd.load_vocab(_config([f"{_ram_dir()}/o"], vocab_file=str(vocab)))
  assert f"--vocab_file={vocab}: line 30523 is blank" in caplog.text
  assert "vocab_size is at least 30523" in caplog.text


def test_bad_input_files(caplog):
  base = _ram_dir()
  bad = _write_text(f"{base}/bad.txt", b"fine line\n\nanother\n\xc3\x28 broken\n")
  with pytest.raises(corpus.InputError, match=r"bad\.txt:4: invalid UTF-8"):
    cpd.run(_config([f"{base}/o1"], inputs=[bad]))
  assert not tf.io.gfile.exists(f"{base}/o1")
  summary = cpd.run(_config([f"{base}/o2"], inputs=[bad], errors="skip"))
  assert summary["documents"] == 2
  assert record_schema.read_metadata(f"{base}/o2.metadata.json")["counts"]["skipped_lines"] == 1

  empty = _write_text(f"{base}/empty.txt", b"")
  blank = _write_text(f"{base}/blank.txt", b"\n  \n\t\n")
  with pytest.raises(corpus.InputError, match="no text found"):
    cpd.run(_config([f"{base}/o3"], inputs=[empty, blank]))

  one_doc = _write_text(f"{base}/one.txt", "".join(
      f"Sentence {i} of the only document.\n" for i in range(40)).encode())
  with caplog.at_level(logging.WARNING):
    summary = cpd.run(_config([f"{base}/o4"], inputs=[one_doc, empty]))
  assert summary["documents"] == 1 and summary["instances"] > 0
  assert "single document" in caplog.text
  assert "empty.txt is empty" in caplog.text


def test_unwritable_output(tmp_path):
  blocker = tmp_path / "file.txt"
  blocker.write_text("x")
  with pytest.raises(writer_lib.OutputError, match="--output_file"):
    cpd.run(_config([str(blocker / "sub" / "o.tfrecord")]))
  with pytest.raises(writer_lib.OutputError, match="listed twice"):
    cpd.run(_config([str(tmp_path / "o"), str(tmp_path / "o")]))


def test_globs_and_lists_of_inputs(tmp_path):
  (tmp_path / "in").mkdir()
  for i in range(3):
    (tmp_path / "in" / f"part{i}.txt").write_text(
        "".join(f"Doc {i} sentence {j}.\n" for j in range(20)) + "\n")
  out = str(tmp_path / "o.tfrecord")
  summary = cpd.run(_config([out], inputs=[str(tmp_path / "in" / "part*.txt")]))
  assert summary["documents"] == 3
  config = cpd.DataConfig(
      input_patterns=cli.split_list(f"{tmp_path}/in/part0.txt, {tmp_path}/in/part[12].txt"),
      output_files=(str(tmp_path / "o2.tfrecord"),), vocab_file=VOCAB_FILE)
  assert cpd.run(config)["documents"] == 3
  assert dataclasses.asdict(config)["dupe_factor"] == 10  # the original's defaults
  assert json.loads(json.dumps(config.flag_values()))["input_file"].count(",") == 1


# === The TensorFlow-free local writer ===


def test_crc32c_known_values():
  crcs = writer_lib.crc32c_many([b"123456789", b"", b"\x00" * 32, b"a"])
  # RFC 3720 check value, empty input, iSCSI's 32 zero bytes, and zlib-independent "a".
  assert [int(c) for c in crcs] == [0xE3069283, 0x0, 0x8A9136AA, 0xC1D04330]


def test_local_framing_equals_tensorflow(tmp_path):
  rng = random.Random(5)
  records = [bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 7, 300, 1000])))
             for _ in range(60)]
  theirs = tmp_path / "tf.tfrecord"
  with tf.io.TFRecordWriter(str(theirs)) as w:
    for r in records:
      w.write(r)
  assert writer_lib.frame_records(records) == theirs.read_bytes()
  for compression in ("", "GZIP"):
    ours = tmp_path / f"ours{compression}.tfrecord"
    with writer_lib.RecordWriter([str(ours)], compression) as w:
      for r in records:
        w.write(r)
      w.commit()
    assert _records(str(ours), compression) == records
    assert not [p for p in os.listdir(tmp_path) if "incomplete" in p]


@pytest.mark.slow
def test_local_run_does_not_import_tensorflow(tmp_path):
  out = tmp_path / "o.tfrecord"
  code = (
      "import sys\n"
      f"sys.path.insert(0, {REPO_ROOT!r})\n"
      "from bert_tf.data import pretraining_data as cpd\n"
      f"cpd.run(cpd.DataConfig(input_patterns=({ZH_INPUT!r},), output_files=({str(out)!r},), "
      f"vocab_file={VOCAB_FILE!r}, max_seq_length=64, max_predictions_per_seq=10, "
      "dupe_factor=1, compression='GZIP', reproduce_original=True))\n"
      "print('tensorflow' in sys.modules)\n")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().splitlines()[-1] == "False"
  assert _content_md5(_records(str(out), "GZIP")) == ZH_MD5


# === inspect_records.py ===


def test_inspect_records(tmp_path):
  from bert_tf.data import records as inspect_records  # pylint: disable=g-import-not-at-top
  import io  # pylint: disable=g-import-not-at-top
  out = tmp_path / "o.tfrecord.gz"
  cpd.run(_config([str(out)], compression="GZIP"))
  report = io.StringIO()
  assert inspect_records.inspect_file(str(out), num_examples=1, out=report) == 0
  text = report.getvalue()
  assert "345 valid records, 0 invalid; max_seq_length=64 max_predictions_per_seq=10" in text
  assert "{=" in text and "[CLS]" in text  # decoded with the vocab named in the metadata

  # The committed golden file has no metadata: lengths come from its first record.
  report = io.StringIO()
  assert inspect_records.inspect_file(ZH_GOLDEN, out=report) == 0
  assert "345 valid records" in report.getvalue()

  # Flip a byte inside record k's data: records before it are still read and counted.
  golden = _records(ZH_GOLDEN)
  starts = [0]
  for r in golden:
    starts.append(starts[-1] + 16 + len(r))
  k = 10
  data = bytearray(open(ZH_GOLDEN, "rb").read())
  data[starts[k] + 12 + 20] ^= 0xFF
  corrupt = tmp_path / "corrupt.tfrecord"
  corrupt.write_bytes(bytes(data))
  report = io.StringIO()
  assert inspect_records.inspect_file(str(corrupt), out=report) == 1
  assert (f"corrupt.tfrecord: record {k} at byte {starts[k]}: data checksum mismatch"
          in report.getvalue())
  assert f"{k} valid records, 1 invalid" in report.getvalue()
  assert list(writer_lib.iter_records(ZH_GOLDEN)) == golden

  truncated = tmp_path / "truncated.tfrecord"
  truncated.write_bytes(open(ZH_GOLDEN, "rb").read()[:-100])
  report = io.StringIO()
  assert inspect_records.inspect_file(str(truncated), out=report) == 1
  assert (f"record 344 at byte {starts[344]}: truncated record" in report.getvalue())
  assert "344 valid records, 1 invalid" in report.getvalue()

  # A record that parses but breaks the schema's invariants.
  encoder = record_schema.ExampleEncoder(64, 10, 30522)
  bad = tmp_path / "bad.tfrecord"
  good = encoder.encode([101, 7, 102, 8, 102], 3, [1], [7], False)
  broken = encoder.encode([101, 7, 102, 8, 102], 3, [0], [7], False)  # position 0 is [CLS]
  bad.write_bytes(writer_lib.frame_records([good, broken, good]))
  report = io.StringIO()
  assert inspect_records.inspect_file(str(bad), out=report) == 1
  assert "record 1: masked_lm_positions are not distinct ascending" in report.getvalue()


@pytest.mark.slow
def test_inspect_records_cli(tmp_path):
  out = tmp_path / "o.tfrecord"
  cpd.run(_config([str(out)]))
  cmd = [sys.executable, os.path.join(REPO_ROOT, "data_prep", "inspect_records.py"),
         "--num_examples=2", str(out), str(tmp_path / "missing.tfrecord")]
  result = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert result.returncode == 1  # the missing file
  assert "345 valid records, 0 invalid" in result.stdout
  assert "missing.tfrecord: no such file" in result.stdout


# === Default mode: blocks of documents, parallel ===


def _synthetic_corpus(path, num_documents=240, seed=0):
  """Many documents of varied length, cut from the committed English fixture."""
  with open(os.path.join(TEST_DATA, "cpd_austen_100k.txt"), encoding="utf-8") as f:
    lines = [line.strip() for line in f if line.strip()]
  rng = random.Random(seed)
  with open(path, "w", encoding="utf-8") as f:
    for _ in range(num_documents):
      start = rng.randrange(len(lines))
      f.write("\n".join(lines[start:start + rng.randint(1, 30)]) + "\n\n")
  return str(path)


@pytest.mark.slow
def test_default_mode_is_independent_of_the_worker_count(tmp_path):
  corpus = _synthetic_corpus(tmp_path / "corpus.txt")
  outputs = []
  for workers in (1, 2):
    out = str(tmp_path / f"w{workers}.tfrecord")
    summary = cpd.run(_config([out], inputs=[corpus], reproduce_original=False,
                              num_workers=workers, block_size_mb=0.005, dupe_factor=2))
    outputs.append(open(out, "rb").read())
  assert summary["documents"] == 240 and summary["instances"] > 500
  assert "pipelined" in cpd.format_summary(summary)
  assert outputs[0] == outputs[1]
  meta = record_schema.read_metadata(out + ".metadata.json")
  assert meta["flags"]["reproduce_original"] is False and meta["counts"]["instances"] == (
      summary["instances"])


def test_default_mode_is_the_algorithm_per_block(tmp_path, monkeypatch):
  # One window, one block: the output must be exactly the reference algorithm run on the
  # window-shuffled documents with the block's generator.
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  from bert_tf.data import instances as I  # pylint: disable=g-import-not-at-top
  out = str(tmp_path / "o.tfrecord")
  cpd.run(_config([out], reproduce_original=False, num_workers=1, block_size_mb=100))
  tokenizer = tokenization.FullTokenizer(VOCAB_FILE)
  vocab = I.VocabTables(tokenizer.vocab)
  docs, _ = I.read_documents([ZH_INPUT], tokenizer.tokenize_to_ids)
  # The window shuffle acts on text documents; a document whose lines all lack tokens would
  # be dropped after it, but this corpus has none.
  random.Random("bert_tf-window:12345:0").shuffle(docs)
  options = I.InstanceOptions(**ZH_FLAGS, exact_draws=False)  # the default mode's draws
  encoder = record_schema.ExampleEncoder(64, 10, vocab.size)
  expected = I.create_training_instances(docs, options, vocab, I.block_rng(12345, 0, 0),
                                         transform=lambda inst: encoder.encode(*inst))
  assert _records(out) == expected


@pytest.mark.slow
def test_default_mode_statistics_match_reference_mode(tmp_path):
  corpus = _synthetic_corpus(tmp_path / "corpus.txt", num_documents=600, seed=1)
  figures = {}
  for mode in ("reference", "default"):
    out = str(tmp_path / f"{mode}.tfrecord")
    figures[mode] = cpd.run(_config([out], inputs=[corpus], max_seq_length=128,
                                    max_predictions_per_seq=20, dupe_factor=3,
                                    reproduce_original=mode == "reference",
                                    block_size_mb=0.02))
  ref, new = figures["reference"], figures["default"]
  # One seed on ~4k instances: sampling noise alone is about 1 point, hence the margins.
  assert abs(new["instances"] / ref["instances"] - 1) < 0.03
  assert abs(new["mean_length"] / ref["mean_length"] - 1) < 0.02
  assert abs(new["full_length_fraction"] - ref["full_length_fraction"]) < 0.03
  assert abs(new["mean_masked_tokens"] / ref["mean_masked_tokens"] - 1) < 0.02
  assert abs(new["random_next_fraction"] - ref["random_next_fraction"]) < 0.03


# === --output_dir shards, reruns and killed runs ===


def test_output_dir_shards_equal_the_output_file_list(tmp_path):
  shards = tmp_path / "shards"
  summary = cpd.run(_config([], output_dir=str(shards), num_output_shards=3))
  names = [f"pretraining-0000{i}-of-00003.tfrecord" for i in range(3)]
  assert sorted(os.listdir(shards)) == sorted(names + [n + ".metadata.json" for n in names])
  assert summary["output_files"] == [f"{shards}/{n}" for n in names]
  # The same round-robin as the original's --output_file list.
  listed = [str(tmp_path / f"l{i}.tfrecord") for i in range(3)]
  cpd.run(_config(listed))
  for name, path in zip(names, listed):
    assert _records(f"{shards}/{name}") == _records(path)
  counts = [record_schema.read_metadata(f"{shards}/{n}.metadata.json")["counts"] for n in names]
  assert [c["instances_in_file"] for c in counts] == [115, 115, 115]
  assert counts[0]["output_files"] == summary["output_files"]
  meta = record_schema.read_metadata(f"{shards}/{names[0]}.metadata.json")
  assert meta["flags"]["output_dir"] == str(shards) and meta["flags"]["num_output_shards"] == 3
  # GZIP shards are named .tfrecord.gz; ram:// folders work too.
  base = _ram_dir()
  cpd.run(_config([], output_dir=f"{base}/gz", num_output_shards=2, compression="GZIP"))
  assert sorted(tf.io.gfile.listdir(f"{base}/gz")) == [
      "pretraining-00000-of-00002.tfrecord.gz",
      "pretraining-00000-of-00002.tfrecord.gz.metadata.json",
      "pretraining-00001-of-00002.tfrecord.gz",
      "pretraining-00001-of-00002.tfrecord.gz.metadata.json"]
  assert len(_records(f"{base}/gz/pretraining-00001-of-00002.tfrecord.gz", "GZIP")) == 172


@pytest.mark.parametrize("overrides, message", [
    (dict(output_files=("o.tfrecord",), output_dir="d"),
     "--output_file and --output_dir are mutually exclusive"),
    (dict(output_files=("o.tfrecord",), num_output_shards=4),
     "--num_output_shards needs --output_dir"),
    (dict(output_files=()), "one of --output_file or --output_dir is required"),
    (dict(output_files=(), output_dir="d", num_output_shards=0),
     "--num_output_shards must be a positive integer, got 0"),
])
def test_output_flags_conflicts(overrides, message):
  with pytest.raises(cpd.UsageError, match=message):
    cpd.run(_config((), **overrides))


def test_cli_output_dir_and_output_file_conflict(tmp_path, capsys):
  script = helpers.load_script("create_pretraining_data")
  common = ["create_pretraining_data.py", f"--input_file={ZH_INPUT}", f"--vocab_file={VOCAB_FILE}"]
  cases = [
      ([f"--output_file={tmp_path}/o.tfrecord", f"--output_dir={tmp_path}/d"],
       "--output_file and --output_dir are mutually exclusive"),
      ([f"--output_file={tmp_path}/o.tfrecord", "--num_output_shards=1"],
       "--num_output_shards needs --output_dir"),
      ([], "one of --output_file or --output_dir is required"),
      ([f"--output_file={tmp_path}/o.tfrecord", "--reproduce_original", "--num_workers=2",
        "--block_size_mb=2"], "--reproduce_original runs the original's single pass, which has "
                              "no --num_workers or --block_size_mb: drop them"),
  ]
  for extra, message in cases:
    assert helpers.run_cli_in_process(script, common + extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
  assert os.listdir(tmp_path) == []


def test_output_dir_rerun_needs_overwrite_and_replaces_other_layouts(tmp_path):
  shards = str(tmp_path / "shards")
  cpd.run(_config([], output_dir=shards, num_output_shards=3))
  before = {n: open(os.path.join(shards, n), "rb").read() for n in os.listdir(shards)}
  with pytest.raises(writer_lib.OutputError,
                     match=r"--output_dir: .*pretraining-00000-of-00003\.tfrecord already exists"
                           r".*--overwrite"):
    cpd.run(_config([], output_dir=shards, num_output_shards=3))
  # Another shard count would leave a mixed folder: refused too, naming the old shards.
  with pytest.raises(writer_lib.OutputError,
                     match=r"already holds shards of another run \(pretraining-00000-of-00003"
                           r"\.tfrecord and more\); pass --overwrite"):
    cpd.run(_config([], output_dir=shards, num_output_shards=2))
  assert {n: open(os.path.join(shards, n), "rb").read() for n in os.listdir(shards)} == before
  # A file that is not one of our shards is never touched.
  _write_text(os.path.join(shards, "notes.txt"), b"keep me")
  cpd.run(_config([], output_dir=shards, num_output_shards=2, overwrite=True))
  assert sorted(os.listdir(shards)) == [
      "notes.txt", "pretraining-00000-of-00002.tfrecord",
      "pretraining-00000-of-00002.tfrecord.metadata.json",
      "pretraining-00001-of-00002.tfrecord",
      "pretraining-00001-of-00002.tfrecord.metadata.json"]
  assert sum(len(_records(os.path.join(shards, f"pretraining-0000{i}-of-00002.tfrecord")))
             for i in range(2)) == 345
  # A file where the folder should be is named.
  not_a_folder = _write_text(str(tmp_path / "file"), b"x")
  with pytest.raises(writer_lib.OutputError, match=r"--output_dir: .*file exists and is not a "
                                                   r"folder"):
    cpd.run(_config([], output_dir=not_a_folder, overwrite=True))


@pytest.mark.slow
def test_killed_run_leaves_nothing_that_looks_complete(tmp_path):
  corpus = _synthetic_corpus(tmp_path / "corpus.txt", num_documents=1500, seed=2)
  shards = tmp_path / "shards"
  shards.mkdir()
  config = dict(input_patterns=(corpus,), output_files=(), output_dir=str(shards),
                num_output_shards=2, vocab_file=VOCAB_FILE, max_seq_length=64,
                max_predictions_per_seq=10, dupe_factor=2, num_workers=2, block_size_mb=0.05)
  marker = str(tmp_path / "records_on_disk")
  # The run stops itself right after its first records reach the disk (a flush), so the kill
  # always lands mid-run: no race with a run that finishes first on a fast machine.
  code = ("import sys, time\n"
          f"sys.path.insert(0, {REPO_ROOT!r})\n"
          "from bert_tf.data import pretraining_data as cpd\n"
          "from bert_tf.data import writer\n"
          "flush = writer._LocalRecordFile._flush\n"
          "def flush_then_wait(self):\n"
          "  flush(self)\n"
          "  if self._file.tell() > 0:\n"
          f"    open({marker!r}, 'w').close()\n"
          "    time.sleep(600)\n"
          "writer._LocalRecordFile._flush = flush_then_wait\n"
          f"cpd.run(cpd.DataConfig(**{config!r}))\n")
  # Its own process group, so the SIGKILL reaches the workers too (as an OOM kill of the
  # job would); the temporary files are named after the main process.
  proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    # Wait until records are on disk: the local writer flushes every 4,096 records.
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not os.path.exists(marker):
      time.sleep(0.02)
    assert proc.poll() is None and os.path.exists(marker), "no records reached the disk"
    assert any(os.path.getsize(shards / n) > 0 for n in os.listdir(shards))
    os.killpg(proc.pid, signal.SIGKILL)
  finally:
    proc.wait()
  # The dead run's lock stays (its pid is gone: the rerun takes it over).
  left = sorted(n for n in os.listdir(shards) if n != bert_io.LOCK_NAME)
  assert left and all(f".incomplete-{proc.pid}" in n for n in left), left
  assert not [n for n in left if writer_lib.SHARD_PATTERN.match(n) or n.endswith(".json")]
  # The rerun (same flags, no --overwrite needed: nothing complete exists) succeeds and clears
  # the dead run's temporary files.
  summary = cpd.run(cpd.DataConfig(**config))
  names = sorted(os.listdir(shards))
  assert names == ["pretraining-00000-of-00002.tfrecord",
                   "pretraining-00000-of-00002.tfrecord.metadata.json",
                   "pretraining-00001-of-00002.tfrecord",
                   "pretraining-00001-of-00002.tfrecord.metadata.json"]
  assert summary["instances"] > 2 * 4096
  assert sum(len(_records(str(shards / n))) for n in names if n.endswith(".tfrecord")) == (
      summary["instances"])


# === --segmented_input: whole-word masking for pre-segmented (e.g. Chinese) text ===


def test_segmented_input_masks_whole_chinese_words(tmp_path):
  from bert_tf import tokenization  # pylint: disable=g-import-not-at-top
  # A stand-in segmenter: every run of CJK characters is cut into words of two characters (a
  # last odd one joins the word before it), so no Chinese word has a single character.
  def segment(line):
    words, run = [], ""
    for char in line + "\n":
      if tokenization.is_cjk_codepoint(ord(char)):
        run += char
        continue
      if run:
        pieces = [run[i:i + 2] for i in range(0, len(run), 2)]
        if len(pieces) > 1 and len(pieces[-1]) == 1:
          last = pieces.pop()
          pieces[-1] += last
        words.append(" " + " ".join(pieces) + " ")
        run = ""
      words.append(char)
    return "".join(words[:-1])

  segmented = tmp_path / "zh_segmented.txt"
  with open(ZH_INPUT, encoding="utf-8") as f, open(segmented, "w", encoding="utf-8") as out:
    for line in f:
      out.write(segment(line.rstrip("\n")) + "\n")
  with open(VOCAB_FILE, encoding="utf-8") as f:
    tokens = [line.rstrip("\n") for line in f]

  def paired_fraction(path):
    """Of the masked CJK positions, the share with a masked CJK neighbour."""
    paired = total = 0
    for record in _records(path):
      d = record_schema.decode_example(record, 64, 10)
      positions = [p for p, w in zip(d["masked_lm_positions"], d["masked_lm_weights"]) if w]
      labels = dict(zip(positions, d["masked_lm_ids"]))
      assert max(d["input_ids"]) < 30522  # no word tag ever reaches a record
      # This English vocab lacks many Chinese characters: [UNK] stands for those.
      cjk = {p for p in positions if tokens[labels[p]] == "[UNK]"
             or tokenization.is_cjk_codepoint(ord(tokens[labels[p]][0]))}
      total += len(cjk)
      paired += sum(1 for p in cjk if p - 1 in cjk or p + 1 in cjk)
    return paired / total

  fractions = {}
  for name, overrides in [("plain", {}),
                          ("reference", dict(segmented_input=True)),
                          ("default", dict(segmented_input=True, reproduce_original=False,
                                           num_workers=1))]:
    out = str(tmp_path / f"{name}.tfrecord")
    cpd.run(_config([out], inputs=[str(segmented)], do_whole_word_mask=True, **overrides))
    fractions[name] = paired_fraction(out)
    assert record_schema.read_metadata(out + ".metadata.json")["flags"]["segmented_input"] is bool(
        overrides)
  # Without it the characters are masked one by one (the original's behaviour for Chinese).
  assert fractions["plain"] < 0.5, fractions
  # With it nearly every masked character has its word's other half masked too (single-character
  # words remain where a run of CJK characters has odd length or truncation cut a word).
  assert fractions["reference"] > 0.9 and fractions["default"] > 0.9, fractions
  with pytest.raises(cpd.UsageError, match="--segmented_input .* needs --do_whole_word_mask"):
    cpd.run(_config([str(tmp_path / "x.tfrecord")], segmented_input=True))
