"""Tests for bert_tf/record_schema.py: the TFRecord schema, its encoder and the metadata file."""

import collections
import json
import random
import struct

import pytest
import tensorflow as tf
from hypothesis import given, settings, strategies as st

from bert_tf import record_schema


def reference_example(input_ids, num_segment_a, positions, ids, is_random_next, seq_len,
                      max_pred, v2=False):
  """The original's feature construction with the tf.train.Example protos."""
  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  def pad(values, n, fill=0):
    return list(values) + [fill] * (n - len(values))

  f = collections.OrderedDict()
  f["input_word_ids" if v2 else "input_ids"] = ints(pad(input_ids, seq_len))
  f["input_mask"] = ints(pad([1] * len(input_ids), seq_len))
  f["input_type_ids" if v2 else "segment_ids"] = ints(pad(
      [0] * num_segment_a + [1] * (len(input_ids) - num_segment_a), seq_len))
  f["masked_lm_positions"] = ints(pad(positions, max_pred))
  f["masked_lm_ids"] = ints(pad(ids, max_pred))
  f["masked_lm_weights"] = tf.train.Feature(
      float_list=tf.train.FloatList(value=pad([1.0] * len(ids), max_pred, 0.0)))
  f["next_sentence_labels"] = ints([1 if is_random_next else 0])
  return tf.train.Example(features=tf.train.Features(feature=f))


def random_instance(seed):
  """A random valid instance (plain `random`: hypothesis list strategies are slow at 512)."""
  rng = random.Random(seed)
  seq_len = rng.choice([5, 6, 64, 128, 512, rng.randint(5, 512)])
  max_pred = rng.randint(1, seq_len - 3)
  vocab_size = rng.choice([100, 300, 30522])
  n = rng.randint(3, seq_len)
  input_ids = [rng.randrange(vocab_size) for _ in range(n)]
  num_a = rng.randint(2, n - 1)
  k = rng.randint(0, min(max_pred, n))
  positions = sorted(rng.sample(range(n), k))
  ids = [rng.randrange(vocab_size) for _ in range(k)]
  return seq_len, max_pred, vocab_size, input_ids, num_a, positions, ids, rng.random() < 0.5


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), v2=st.booleans())
def test_encoder_equals_deterministic_proto_serialisation(seed, v2):
  case = random_instance(seed)
  seq_len, max_pred, vocab_size, input_ids, num_a, positions, ids, nsp = case
  encoder = record_schema.ExampleEncoder(seq_len, max_pred, vocab_size, use_v2_feature_names=v2)
  ours = encoder.encode(input_ids, num_a, positions, ids, nsp)
  expected = reference_example(input_ids, num_a, positions, ids, nsp, seq_len, max_pred, v2)
  assert ours == expected.SerializeToString(deterministic=True)


def test_encoder_large_vocab_ids():
  # Ids of 2**14 and above need three varint bytes (multilingual vocabularies).
  encoder = record_schema.ExampleEncoder(6, 2, 250002)
  ids = [250001, 2**14, 127, 128, 2**14 - 1]
  expected = reference_example(ids, 3, [0, 4], [5, 250001], False, 6, 2)
  assert encoder.encode(ids, 3, [0, 4], [5, 250001], False) == expected.SerializeToString(
      deterministic=True)


def test_entry_headers_give_the_proto_bytes():
  headers = record_schema.EntryHeaders("input_ids")
  for n in (1, 5, 127, 128, 300, 16383, 16384):
    packed = bytes([n % 100]) * n
    entry = headers[n] + packed
    example = tf.train.Example(features=tf.train.Features(feature={
        "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=list(packed)))}))
    assert b"\x0a" + record_schema.varint(len(entry)) + entry == example.SerializeToString(
        deterministic=True), n
  floats = record_schema.EntryHeaders("label_ids", b"\x12")
  entry = floats[4] + struct.pack("<f", 0.6)
  example = tf.train.Example(features=tf.train.Features(feature={
      "label_ids": tf.train.Feature(float_list=tf.train.FloatList(value=[0.6]))}))
  assert b"\x0a" + record_schema.varint(len(entry)) + entry == example.SerializeToString()
  with pytest.raises(ValueError, match="non-empty"):
    headers[0]  # pylint: disable=pointless-statement


def test_varint_table():
  # pylint: disable=protected-access
  table = record_schema.varint_table(70000)
  for i in (0, 1, 127, 128, 300, 16383, 16384, 69999):
    assert table[i] == record_schema.varint(i)
  assert record_schema.varint(2**21) == bytes([0x80, 0x80, 0x80, 0x01])
  assert record_schema.varint(300) == bytes([0xAC, 0x02])  # the protobuf documentation's example


def test_parsing_spec_reads_encoded_records():
  encoder = record_schema.ExampleEncoder(8, 3, 50)
  record = encoder.encode([2, 7, 3, 9, 3], 3, [1, 3], [7, 9], True)
  parsed = tf.io.parse_single_example(record, record_schema.parsing_spec(8, 3))
  assert parsed["input_ids"].dtype == tf.int64
  assert parsed["masked_lm_weights"].dtype == tf.float32
  assert parsed["input_ids"].numpy().tolist() == [2, 7, 3, 9, 3, 0, 0, 0]
  assert parsed["input_mask"].numpy().tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
  assert parsed["segment_ids"].numpy().tolist() == [0, 0, 0, 1, 1, 0, 0, 0]
  assert parsed["masked_lm_positions"].numpy().tolist() == [1, 3, 0]
  assert parsed["masked_lm_ids"].numpy().tolist() == [7, 9, 0]
  assert parsed["masked_lm_weights"].numpy().tolist() == [1.0, 1.0, 0.0]
  assert parsed["next_sentence_labels"].numpy().tolist() == [1]


def test_record_file_writer_appears_only_when_complete(tmp_path):
  path = str(tmp_path / "out" / "records.tf_record")
  with record_schema.RecordFileWriter(path) as writer:
    writer.write(b"first")
    writer.write(b"second")
    assert not (tmp_path / "out" / "records.tf_record").exists()
  assert writer.num_records == 2
  assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == [b"first", b"second"]
  assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["records.tf_record"]

  with pytest.raises(RuntimeError, match="stop"):
    with record_schema.RecordFileWriter(path) as writer:
      writer.write(b"partial")
      raise RuntimeError("stop")
  # The complete file is left as it was, and no temporary remains.
  assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == [b"first", b"second"]
  assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["records.tf_record"]
  with pytest.raises(ValueError, match="inside `with RecordFileWriter"):
    record_schema.RecordFileWriter(path).write(b"outside")


def test_v2_names():
  names = record_schema.feature_names(use_v2_feature_names=True)
  assert list(names.values()) == ["input_word_ids", "input_mask", "input_type_ids",
                                  "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                                  "next_sentence_labels"]
  spec = record_schema.parsing_spec(16, 4, use_v2_feature_names=True)
  assert set(spec) == set(names.values())
  assert spec["input_word_ids"].shape == [16] and spec["masked_lm_ids"].shape == [4]
  assert spec["next_sentence_labels"].shape == [1]


def test_encoder_rejects_bad_instances():
  encoder = record_schema.ExampleEncoder(6, 2, 10)
  with pytest.raises(record_schema.SchemaError, match="max_seq_length=6"):
    encoder.encode(list(range(7)), 2, [], [], False)
  with pytest.raises(record_schema.SchemaError, match="max_predictions_per_seq=2"):
    encoder.encode([1, 2, 3], 2, [1, 2, 0], [1, 2, 3], False)
  with pytest.raises(record_schema.SchemaError, match="out of range"):
    encoder.encode([1, 10, 3], 2, [], [], False)


def test_decode_example_checks_the_schema():
  encoder = record_schema.ExampleEncoder(8, 3, 50)
  record = encoder.encode([2, 7, 3, 9, 3], 3, [1], [7], False)
  decoded = record_schema.decode_example(record, 8, 3)
  assert decoded["masked_lm_weights"] == [1.0, 0.0, 0.0]
  with pytest.raises(record_schema.SchemaError, match="'input_ids' has 8 values, expected 9"):
    record_schema.decode_example(record, 9, 3)
  with pytest.raises(record_schema.SchemaError, match="'input_word_ids' is missing|unexpected"):
    record_schema.decode_example(record, 8, 3, use_v2_feature_names=True)
  with pytest.raises(record_schema.SchemaError, match="not a tf.train.Example"):
    record_schema.decode_example(b"\xff\xff\xff", 8, 3)


def _metadata(**overrides):
  values = dict(max_seq_length=128, max_predictions_per_seq=20, use_v2_feature_names=False,
                vocab_size=30522, vocab_md5="abc", do_lower_case=True, do_whole_word_mask=False,
                flags={"random_seed": 1}, counts={"instances": 3}, program_version="test 0")
  values.update(overrides)
  return record_schema.make_metadata(**values)


def test_metadata_round_trip_and_check():
  path = f"ram://features_test_{random.getrandbits(32)}/out.tfrecord"
  meta_path = record_schema.metadata_path(path)
  assert meta_path == path + ".metadata.json"
  tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
  record_schema.write_metadata(meta_path, _metadata())
  assert not tf.io.gfile.exists(meta_path + ".tmp")
  meta = record_schema.read_metadata(meta_path)
  assert meta["features"][0] == {"name": "input_ids", "dtype": "int64", "length": 128}
  assert meta["features"][5] == {"name": "masked_lm_weights", "dtype": "float32", "length": 20}
  assert meta["counts"] == {"instances": 3}
  record_schema.check_metadata(meta, max_seq_length=128, max_predictions_per_seq=20,
                               vocab_size=30522, do_lower_case=True)
  record_schema.check_metadata(meta, vocab_size=40000)  # a larger model vocab covers the data
  with pytest.raises(record_schema.MetadataError,
                     match=r"--max_seq_length=512 .*max_seq_length=128.*--do_lower_case=False"):
    record_schema.check_metadata(meta, max_seq_length=512, do_lower_case=False)
  with pytest.raises(record_schema.MetadataError, match="vocab_size=100"):
    record_schema.check_metadata(meta, vocab_size=100)


def test_read_metadata_errors(tmp_path):
  with pytest.raises(record_schema.MetadataError, match="not found"):
    record_schema.read_metadata(str(tmp_path / "missing.json"))
  bad = tmp_path / "bad.json"
  bad.write_text("{not json")
  with pytest.raises(record_schema.MetadataError, match="not valid JSON"):
    record_schema.read_metadata(str(bad))
  other = tmp_path / "other.json"
  other.write_text(json.dumps({"hello": 1}))
  with pytest.raises(record_schema.MetadataError, match="not a pretraining-data metadata file"):
    record_schema.read_metadata(str(other))


def test_vocab_checksum(tmp_path):
  path = tmp_path / "v.txt"
  path.write_bytes(b"[PAD]\n[UNK]\n")
  import hashlib  # pylint: disable=g-import-not-at-top
  assert record_schema.vocab_checksum(str(path)) == hashlib.md5(b"[PAD]\n[UNK]\n").hexdigest()
