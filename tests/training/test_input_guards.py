"""Training refuses bad record files before the first step, naming the flag and the file.

Reliability probe items 1, 5 and 6: an empty record file made the input pipeline spin forever,
records without metadata whose lengths contradict the flags failed deep inside TensorFlow, and
a corrupt or truncated file stopped training with a DataLossError naming no file.
"""

import gzip
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import record_schema
from bert_tf.model import checkpoints
from bert_tf.training import record_files
from bert_tf.training import pretraining
from bert_tf.training.errors import TrainingError

from tests import helpers
from tests.helpers import PREDS, SEQ, make_records, tiny_config, tiny_settings


@pytest.fixture(scope="module")
def good(tmp_path_factory):
  return make_records(str(tmp_path_factory.mktemp("good") / "train.tfrecord"), num_examples=32)


def _run(data, tmp_path, **changes):
  changes.setdefault("num_train_steps", 2)
  return pretraining.run_pretraining(tiny_config(), tiny_settings(
      data, str(tmp_path / "out"), **changes))


def test_an_empty_record_file_is_refused_before_training(good, tmp_path):
  empty = tmp_path / "part-00001.tfrecord"
  tf.io.TFRecordWriter(str(empty)).close()  # no record: 0 bytes
  shutil.copy(record_schema.metadata_path(good), record_schema.metadata_path(str(empty)))
  with pytest.raises(TrainingError, match=r"--input_file: .*part-00001.tfrecord holds no "
                                               r"records"):
    _run(f"{good},{empty}", tmp_path)
  # Nothing was trained or written.
  assert not os.path.exists(tmp_path / "out" / "checkpoint")


def test_an_empty_gzip_file_is_refused_too(tmp_path):
  empty = tmp_path / "empty.tfrecord.gz"
  with gzip.open(empty, "wb"):
    pass
  assert os.path.getsize(empty) > 0  # a GZIP header, but no record
  with pytest.raises(TrainingError, match="holds no records"):
    _run(str(empty), tmp_path)


@pytest.mark.slow
def test_records_without_metadata_are_checked_against_the_flags(tmp_path):
  data = make_records(str(tmp_path / "long.tfrecord"), num_examples=8, seq=SEQ * 2)
  os.remove(record_schema.metadata_path(data))
  with pytest.raises(TrainingError,
                     match=rf"long.tfrecord: the first record's input_ids has {SEQ * 2} values "
                           rf"but the flags ask for {SEQ}"):
    _run(data, tmp_path)
  # With the data's own lengths it trains.
  result = _run(data, tmp_path, max_seq_length=SEQ * 2, max_predictions_per_seq=PREDS)
  assert result["global_step"] == 2


def test_a_file_without_metadata_among_files_with_it_is_checked_too(good, tmp_path, caplog):
  """Reliability probe item 5: the metadata of the other files used to vouch for it."""
  data = make_records(str(tmp_path / "long.tfrecord"), num_examples=8, seq=SEQ * 2)
  os.remove(record_schema.metadata_path(data))
  with caplog.at_level("WARNING"), pytest.raises(
      TrainingError, match=rf"long.tfrecord: the first record's input_ids has {SEQ * 2} "
                                rf"values but the flags ask for {SEQ}"):
    _run(f"{good},{data}", tmp_path)
  assert "1 input file(s) have no metadata file beside them" in caplog.text
  assert not os.path.exists(tmp_path / "out")


def test_token_ids_beyond_the_configs_vocab_are_refused_naming_the_file(tmp_path):
  data = make_records(str(tmp_path / "big_vocab.tfrecord"), num_examples=8)
  os.remove(record_schema.metadata_path(data))
  with pytest.raises(TrainingError, match=r"big_vocab.tfrecord: the first record's "
                                               r"input_ids holds token id \d+, but the model's "
                                               r"vocab_size is 8 \(--bert_config_file\)"):
    pretraining.run_pretraining(tiny_config(vocab_size=8), tiny_settings(
        data, str(tmp_path / "out"), num_train_steps=2))


def test_a_folder_with_an_unfinished_data_prep_commit_is_refused(good, tmp_path):
  """Reliability probe item 4: a data prep killed mid-commit leaves shards without metadata
  (or new beside old ones) and its journal; training used them without a word."""
  folder = tmp_path / "data"
  folder.mkdir()
  for name in ("pretraining-00000-of-00002.tfrecord", "pretraining-00001-of-00002.tfrecord"):
    shutil.copy(good, folder / name)
  journal = folder / "pretraining-00000-of-00002.tfrecord.incomplete-4242.commit"
  journal.write_text("{}")
  with pytest.raises(TrainingError, match=rf"--input_file: {journal} is the journal of a "
                                               r"create_pretraining_data run that was killed"):
    _run(str(folder / "*.tfrecord"), tmp_path)
  # A glob over the folder never takes temporaries or locks for data.
  (folder / "pretraining-00000-of-00002.tfrecord.incomplete-4242").write_bytes(b"partial")
  (folder / ".bert_tf.lock").write_text("{}")
  assert record_files.expand_file_patterns(str(folder / "*")) == [
      str(folder / "pretraining-00000-of-00002.tfrecord"),
      str(folder / "pretraining-00001-of-00002.tfrecord")]


def test_a_file_that_is_not_records_is_refused_naming_it(good, tmp_path):
  text = tmp_path / "notes.tfrecord"
  text.write_text("these are not records\n" * 20)
  with pytest.raises(TrainingError, match=r"notes.tfrecord cannot be read as a TFRecord "
                                               r"file .*inspect_records.py"):
    _run(f"{good},{text}", tmp_path)


@pytest.mark.slow
def test_a_truncated_file_stops_training_naming_it(good, tmp_path):
  data = tmp_path / "cut.tfrecord"
  with open(good, "rb") as f:
    content = f.read()
  data.write_bytes(content[:len(content) * 2 // 3])  # the first records are whole
  shutil.copy(record_schema.metadata_path(good), record_schema.metadata_path(str(data)))
  with pytest.raises(TrainingError, match=r"--input_file: .*cut.tfrecord is corrupt or "
                                               r"truncated .*inspect_records.py") as raised:
    _run(str(data), tmp_path, num_train_steps=20)
  # TensorFlow's reason, without its wrapping (the function and op it ran in).
  assert re.search(r"truncated \(truncated record at \d+' failed with Read less bytes than "
                   r"requested\); check it with", str(raised.value)), str(raised.value)
  assert "function_node" not in str(raised.value) and "[Op:" not in str(raised.value)


def test_check_record_files_accepts_v2_names_and_reads_gzip(tmp_path):
  path = str(tmp_path / "v2.tfrecord.gz")
  encoder = record_schema.ExampleEncoder(SEQ, PREDS, 100, use_v2_feature_names=True)
  ids = [2, 10, 3, 11, 3]
  with tf.io.TFRecordWriter(path, "GZIP") as writer:
    writer.write(encoder.encode(ids, 3, [1], [10], False))
  lengths = dict(zip(record_schema.feature_names(False).values(),
                     record_schema.feature_lengths(SEQ, PREDS).values()))
  record_files.check_record_files([path], "GZIP", "input_file", lengths)
  with pytest.raises(record_files.InputError, match="masked_lm_positions has"):
    record_files.check_record_files(
        [path], "GZIP", "input_file",
        dict(zip(record_schema.feature_names(False).values(),
                 record_schema.feature_lengths(SEQ, PREDS + 1).values())))


def test_the_file_checks_read_with_tf_datas_autotuning_model_off(tmp_path, monkeypatch):
  """The checks that read whole files or the first record of thousands of shards run with
  the model off, as the training pipelines do (record_files.prefetched says why): every
  iterator they make, through both paths of check_record_files (one pipeline over all files,
  and file by file when some file cannot be read)."""
  from tensorflow.python.data.ops import iterator_ops  # pylint: disable=g-import-not-at-top
  good = make_records(str(tmp_path / "good.tfrecord"), num_examples=3)
  bad = tmp_path / "bad.tfrecord"
  bad.write_bytes(b"not a record file")
  seen = []
  original = iterator_ops.OwnedIterator.__init__

  def recording_init(self, dataset=None, **kwargs):
    seen.append(dataset.options().autotune.enabled)
    original(self, dataset=dataset, **kwargs)

  monkeypatch.setattr(iterator_ops.OwnedIterator, "__init__", recording_init)
  record_files.check_record_files([good, good], "", "input_file")
  assert len(seen) == 1  # one pipeline over all files
  with pytest.raises(record_files.InputError, match="bad.tfrecord cannot be read"):
    record_files.check_record_files([good, str(bad)], "", "input_file")
  assert len(seen) == 4  # that pipeline failed, then one per file
  assert record_files.first_unreadable_file([good, str(bad)], "")[0] == str(bad)
  assert len(seen) == 6
  assert all(enabled is False for enabled in seen), seen


@pytest.mark.slow
def test_a_vocab_other_than_the_datas_is_refused_naming_both_files(good, tmp_path):
  from tests.helpers import VOCAB_TOKENS, write_vocab  # pylint: disable=g-import-not-at-top
  same = write_vocab(str(tmp_path / "vocab.txt"))
  shuffled = tmp_path / "shuffled.txt"
  shuffled.write_text("\n".join(VOCAB_TOKENS[:5] + VOCAB_TOKENS[5:][::-1]) + "\n")
  with pytest.raises(TrainingError,
                     match=rf"--vocab_file=.*shuffled.txt \(md5 .*\) is not the vocab the data "
                           rf"was made with \(md5 .*train.tfrecord.metadata.json\)"):
    _run(good, tmp_path, vocab_file=str(shuffled))
  # The data's own vocab trains; the override flag lets the other one through, loudly.
  assert _run(good, tmp_path, vocab_file=same)["global_step"] == 2
  assert _run(good, tmp_path / "b", vocab_file=str(shuffled),
              allow_tokenizer_mismatch=True)["global_step"] == 2


@pytest.mark.slow
def test_an_unreadable_init_checkpoint_is_one_line_naming_the_flag(good, tmp_path):
  not_a_checkpoint = tmp_path / "model.ckpt"
  (tmp_path / "model.ckpt.index").write_bytes(b"not a checkpoint index" * 10)
  for path, reason in ((tmp_path / "missing.ckpt", "missing.ckpt"),
                       (not_a_checkpoint, "cannot read it as a checkpoint")):
    with pytest.raises(TrainingError,
                       match=rf"^--init_checkpoint={path}: .*{reason}") as raised:
      _run(good, tmp_path / "run", init_checkpoint=str(path))
    assert "\n" not in str(raised.value)
    # The failed run leaves nothing: no record of the run, not even the folder it made.
    assert not (tmp_path / "run" / "out").exists()
  # Weights of another size: the sizes that differ, in one short line; an existing folder keeps
  # what it held, and only that.
  other = tmp_path / "other"
  checkpoints.write_tf1_checkpoint(helpers.random_original_weights(
      tiny_config(hidden_size=32, num_hidden_layers=3, intermediate_size=48),
      np.random.default_rng(0)), str(other / "model.ckpt"))
  (tmp_path / "kept").mkdir()
  (tmp_path / "kept" / "notes.txt").write_text("mine")
  with pytest.raises(TrainingError) as raised:
    pretraining.run_pretraining(tiny_config(), tiny_settings(
        good, str(tmp_path / "kept"), num_train_steps=2,
        init_checkpoint=str(other / "model.ckpt")))
  message = str(raised.value)
  # Its 3 layers are no mismatch: the 2-layer model takes two of them (--init_layers).
  assert re.search(r"shapes differ from the model built from --bert_config_file: the "
                   r"checkpoint has hidden_size 32, intermediate_size 48, the config 64, \d+; "
                   r"\d+ variables, e.g. ", message), message
  assert len(message) < 700 and message.endswith(" more")
  assert os.listdir(tmp_path / "kept") == ["notes.txt"]
