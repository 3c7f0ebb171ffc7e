"""data_prep/inspect_records.py on inputs that are not sound record files.

The probe's item 16 (RELIABILITY_PROBE.md): a file that is no TFRecord, a directory, metadata
training refuses, GZIP without metadata, and the record count after a read error. Each case runs
the script's main in-process and reads its report from stdout.
"""

import os
import struct

import pytest
import tensorflow as tf

from bert_tf import record_schema
from bert_tf.data import writer as writer_lib
from tests import helpers
from tests.helpers import TEST_DATA

AUSTEN = os.path.join(TEST_DATA, "train_austen_s128_p20.tfrecord")  # 64 records, s128 p20
inspect_records = helpers.load_script("inspect_records")


@pytest.fixture(scope="module")
def records():
  return list(writer_lib.iter_records(AUSTEN))


def _write(path, records, compression=""):
  """Writes `records` with TensorFlow's own writer; returns the path as a string."""
  with tf.io.TFRecordWriter(str(path), options=compression or None) as w:
    for record in records:
      w.write(record)
  return str(path)


def _write_metadata(path, num_records, compression=""):
  record_schema.write_metadata(record_schema.metadata_path(str(path)), record_schema.make_metadata(
      max_seq_length=128, max_predictions_per_seq=20, use_v2_feature_names=False,
      vocab_size=30522, vocab_md5="0" * 32, do_lower_case=True, do_whole_word_mask=False,
      flags={}, counts={"instances_in_file": num_records}, program_version="test",
      compression=compression))


def _offset(records, index):
  """Byte offset of record `index` in an uncompressed TFRecord file of `records`."""
  return sum(16 + len(r) for r in records[:index])


def _inspect(capsys, *args):
  """(exit code, stdout) of `inspect_records.py --num_examples=0 args...`."""
  capsys.readouterr()
  code = helpers.run_cli_in_process(inspect_records,
                                    ["inspect_records.py", "--num_examples=0", *args])
  return code, capsys.readouterr().out


def test_a_text_file_is_reported_as_not_a_tfrecord_file(tmp_path, capsys):
  text = tmp_path / "notes.txt"
  text.write_text("hello world, this is plain text and no record file\n" * 20)
  code, out = _inspect(capsys, str(text))
  assert code == 1
  assert (f"{text}: record 0 at byte 0: length checksum mismatch: not a TFRecord file"
          in out), out


def test_a_damaged_length_header_is_named_not_reported_as_truncation(tmp_path, capsys,
                                                                     records):
  # The top byte of record 5's length: the reader sees a length far beyond the file's end.
  data = bytearray(open(_write(tmp_path / "ok.tfrecord", records), "rb").read())
  data[_offset(records, 5) + 5] ^= 0x40
  damaged = tmp_path / "damaged.tfrecord"
  damaged.write_bytes(bytes(data))
  code, out = _inspect(capsys, str(damaged))
  assert code == 1
  assert f"record 5 at byte {_offset(records, 5)}: length checksum mismatch\n" in out, out
  assert "truncated" not in out
  assert "5 valid records, 1 invalid" in out


def test_a_directory_is_a_one_line_error_and_later_files_are_still_inspected(tmp_path, capsys,
                                                                           records):
  directory = tmp_path / "shards"
  directory.mkdir()
  _write(directory / "a.tfrecord", records)
  good = _write(tmp_path / "good.tfrecord", records)
  code, out = _inspect(capsys, str(directory), good)
  assert code == 1
  assert (f"error: {directory}: is a directory, not a record file (give the record files in "
          f"it, e.g. {directory}/*.tfrecord)") in out, out
  assert f"{good}: 64 valid records, 0 invalid" in out


@pytest.mark.parametrize("text, reason", [
    ("{not json", "not valid JSON"),
    ('{"format": "something-else"}', "not a pretraining-data metadata file"),
])
def test_metadata_that_training_refuses_is_an_error(tmp_path, capsys, records, text, reason):
  path = _write(tmp_path / "m.tfrecord", records)
  with open(record_schema.metadata_path(path), "w", encoding="utf-8") as f:
    f.write(text)
  code, out = _inspect(capsys, path)
  assert code == 1
  assert f"error: {path}.metadata.json: {reason}" in out, out
  assert "64 valid records, 0 invalid" in out  # the records are still checked


def test_sound_metadata_and_records_pass(tmp_path, capsys, records):
  path = _write(tmp_path / "ok.tfrecord", records)
  _write_metadata(path, 64)
  code, out = _inspect(capsys, path)
  assert code == 0, out
  assert "64 valid records, 0 invalid; max_seq_length=128 max_predictions_per_seq=20" in out
  assert "error" not in out and "metadata says" not in out


def test_gzip_without_metadata_is_read_as_gzip(tmp_path, capsys, records):
  path = _write(tmp_path / "z.tfrecord", records, "GZIP")
  assert open(path, "rb").read(2) == b"\x1f\x8b"
  code, out = _inspect(capsys, path)
  assert code == 0, out
  assert "64 valid records, 0 invalid; max_seq_length=128 max_predictions_per_seq=20 GZIP" in out
  assert f"note: {path} has no metadata file" in out


def test_a_killed_data_prep_commit_in_the_folder_is_an_error(tmp_path, capsys, records):
  """Probe item 4: shards left by a run killed while committing looked valid."""
  path = _write(tmp_path / "pretraining-00000-of-00002.tfrecord", records)
  journal = tmp_path / "pretraining-00000-of-00002.tfrecord.incomplete-4242.commit"
  journal.write_text("{}")
  code, out = _inspect(capsys, path)
  assert code == 1, out
  assert (f"error: {path}: {journal} is the journal of a create_pretraining_data run killed "
          "while committing") in out
  assert "64 valid records" in out  # the records themselves are still inspected


def test_gzip_read_uncompressed_says_so_and_how_to_read_it(tmp_path, capsys, records):
  path = _write(tmp_path / "z.tfrecord", records, "GZIP")
  code, out = _inspect(capsys, "--compression=", path)
  assert code == 1
  assert (f"{path}: record 0 at byte 0: length checksum mismatch: the file is GZIP-compressed "
          "but is read uncompressed (compression '' from --compression); read it with "
          "--compression=GZIP") in out, out

  # Metadata that says uncompressed over a GZIP file: the same advice, naming the metadata.
  _write_metadata(path, 64, compression="")
  code, out = _inspect(capsys, path)
  assert code == 1
  assert "compression '' from the metadata); read it with --compression=GZIP" in out, out


def test_a_plain_file_read_as_gzip_says_so(tmp_path, capsys, records):
  path = _write(tmp_path / "plain.tfrecord", records)
  code, out = _inspect(capsys, "--compression=GZIP", path)
  assert code == 1
  assert (f"{path}: record 0 at byte 0: the file is not GZIP-compressed but is read as GZIP "
          "(compression GZIP from --compression); read it with --compression=''") in out, out


def test_after_a_read_error_the_count_is_the_records_before_it(tmp_path, capsys, records):
  full = open(_write(tmp_path / "full.tfrecord", records), "rb").read()
  truncated = tmp_path / "truncated.tfrecord"
  truncated.write_bytes(full[:_offset(records, 3) + 100])  # cut inside record 3
  _write_metadata(truncated, 64)
  code, out = _inspect(capsys, str(truncated))
  assert code == 1
  at = _offset(records, 3)
  assert f"record 3 at byte {at}: truncated record" in out, out
  assert f"metadata says 64 records; 3 records before the error at byte {at}" in out, out
  assert "the file holds" not in out


def test_after_a_gzip_read_error_the_count_is_the_records_before_it(tmp_path, capsys,
                                                                    records):
  full = open(_write(tmp_path / "full.tfrecord", records, "GZIP"), "rb").read()
  truncated = tmp_path / "truncated.tfrecord"
  truncated.write_bytes(full[:len(full) // 2])
  _write_metadata(truncated, 64, compression="GZIP")
  code, out = _inspect(capsys, str(truncated))
  assert code == 1
  assert "metadata says 64 records; " in out and " records before the error at byte " in out
  assert "the file holds" not in out and "truncated.tfrecord: record " in out, out


def test_a_count_mismatch_without_a_read_error_is_still_an_error(tmp_path, capsys, records):
  path = _write(tmp_path / "short.tfrecord", records[:60])
  _write_metadata(path, 64)
  code, out = _inspect(capsys, path)
  assert code == 1
  assert "60 valid records, 0 invalid" in out
  assert "metadata says 64 records, the file holds 60" in out, out


def test_a_first_record_that_is_no_example_is_reported_not_raised(tmp_path, capsys, records):
  path = _write(tmp_path / "junk.tfrecord", [b"\xff\xff\xff not a proto"] + records[:2])
  code, out = _inspect(capsys, path)
  assert code == 1
  assert f"{path}: record 0: not a tf.train.Example" in out, out
  assert "2 valid records, 1 invalid; max_seq_length=128 max_predictions_per_seq=20" in out


def test_the_damaged_header_crc_matches_the_writers(records):
  # records._masked_crc must agree with the framing the writer produces (and TF reads).
  from bert_tf.data import records as records_lib  # pylint: disable=g-import-not-at-top
  framed = writer_lib.frame_records(records[:1])
  assert records_lib._masked_crc(framed[:8]) == framed[8:12]  # pylint: disable=protected-access
  assert struct.unpack("<Q", framed[:8])[0] == len(records[0])


def _edited(record, name, index, value):
  """`record` with feature `name`'s value at `index` replaced."""
  example = tf.train.Example.FromString(record)
  values = example.features.feature[name]
  kind = values.WhichOneof("kind")
  getattr(values, kind).value[index] = value
  return example.SerializeToString()


def test_ids_outside_the_vocab_and_weights_that_are_not_finite_are_invalid(tmp_path, capsys,
                                                                           records):
  """What training's decoder refuses, inspection counts invalid: a masked id outside the
  vocab (checked against the metadata's vocab_size, or --vocab_file's without metadata) and a
  masked-LM weight that is not finite (named by record, not a crash)."""
  masked = _edited(records[1], "masked_lm_ids", 0, -3)
  path = _write(tmp_path / "masked.tfrecord", [records[0], masked, records[2]])
  _write_metadata(path, 3)
  code, out = _inspect(capsys, path)
  assert code == 1 and f"{path}: record 1: masked_lm_ids outside [0, 30522)" in out, out
  assert "2 valid records, 1 invalid" in out
  wide = _edited(records[0], "input_ids", 1, 99999)
  path = _write(tmp_path / "wide.tfrecord", [wide, records[1]])  # no metadata
  code, out = _inspect(capsys, path, f"--vocab_file={os.path.join(TEST_DATA, 'vocab_uncased.txt')}")
  assert code == 1 and f"{path}: record 0: input_ids outside [0, 30522)" in out, out
  nan = _edited(records[2], "masked_lm_weights", 0, float("nan"))
  path = _write(tmp_path / "nan.tfrecord", [records[0], nan])
  code, out = _inspect(capsys, path)
  assert code == 1 and f"{path}: record 1: masked_lm_weights are not all finite" in out, out
  assert "1 valid records, 1 invalid" in out
