"""tagging_data: CoNLL reading, first-piece alignment, windows, records, predictions back onto
words."""

import os

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
import numpy as np
import pytest

from bert_tf import tokenization
from bert_tf.tasks.tagging import data as tagging_data
from tests import helpers

VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
NER = os.path.join(helpers.TEST_DATA, "ner")


@pytest.fixture(scope="module")
def tokenizer():
  return tokenization.FullTokenizer(VOCAB, do_lower_case=True)


# === Reading ===


def test_conll_documents_sentences_last_column_and_lines():
  text = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n\n"
          "Peter NNP B-NP I-PER\r\n\n\n-DOCSTART- -X- -X- O\n\nBonn NNP B-NP I-LOC\n")
  sentences = tagging_data.parse_conll(text, "f.txt")
  assert [s.words for s in sentences] == [("EU", "rejects"), ("Peter",), ("Bonn",)]
  assert [s.tags for s in sentences] == [("I-ORG", "O"), ("I-PER",), ("I-LOC",)]
  assert [s.document for s in sentences] == [0, 0, 1]
  assert [s.line for s in sentences] == [3, 6, 11]
  # Without a -DOCSTART- every sentence is in document 0; tabs separate columns too.
  plain = tagging_data.parse_conll("a\tO\nb\tB-X\n\nc O", "g.txt")
  assert [(s.words, s.tags, s.document) for s in plain] == [
      (("a", "b"), ("O", "B-X"), 0), (("c",), ("O",), 0)]


def test_predict_file_without_tags():
  sentences = tagging_data.parse_conll("John\nlives\n\nhere\n", "p.txt", labelled=None)
  assert [s.words for s in sentences] == [("John", "lives"), ("here",)]
  assert all(s.tags is None for s in sentences)
  tagged = tagging_data.parse_conll("John B-PER\n", "p.txt", labelled=None)
  assert tagged[0].tags == ("B-PER",)


@pytest.mark.parametrize("text,message", [
    ("a O\nb\n", "f.txt:2: 1 columns"),
    ("a\nb\n", "f.txt:1: one column"),
    ("a X O\n\nb O\n", "f.txt:3: 2 columns"),
    ("\n\n-DOCSTART- O\n\n", "f.txt: no sentence"),
])
def test_malformed_conll_names_file_and_line(text, message):
  with pytest.raises(tagging_data.ConllFormatError, match=message):
    tagging_data.parse_conll(text, "f.txt")


def test_read_conll_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="no such CoNLL file"):
    tagging_data.read_conll(str(tmp_path / "missing.txt"))
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"a O\n\nb\xff O\n")
  with pytest.raises(tagging_data.ConllFormatError, match=r"bad.txt:3: not valid UTF-8"):
    tagging_data.read_conll(str(bad))


def test_labels_inferred_given_and_unseen_tags():
  sentences = tagging_data.parse_conll("a I-PER\nb O\nc B-LOC\n\nd I-LOC\n", "t.txt")
  assert tagging_data.label_list(sentences) == ["O", "B-LOC", "I-LOC", "I-PER"]
  given_labels = ["O", "I-PER", "I-LOC", "B-LOC", "B-PER"]
  assert tagging_data.label_list(sentences, given_labels) == given_labels
  with pytest.raises(tagging_data.ConllFormatError, match=r"t.txt:3: tag 'B-LOC'"):
    tagging_data.label_list(sentences, ["O", "I-PER", "I-LOC"], "t.txt")
  with pytest.raises(tagging_data.ConllFormatError, match="repeats O"):
    tagging_data.label_list(sentences, ["O", "O", "I-PER"])
  dev = tagging_data.parse_conll("x O\ny B-MISC\n", "dev.txt")
  with pytest.raises(tagging_data.ConllFormatError,
                     match=r"dev.txt:2: tag 'B-MISC' \(word 'y'\) is not one of the 4 labels"):
    tagging_data.check_tags(dev, {t: i for i, t in enumerate(["O", "B-LOC", "I-LOC", "I-PER"])},
                            "dev.txt")


def test_fixture_files_read():
  sizes = {name: len(tagging_data.read_conll(os.path.join(NER, f"{name}.txt")))
           for name in ("train", "dev", "test")}
  assert sizes == {"train": 400, "dev": 120, "test": 120}
  train = tagging_data.read_conll(os.path.join(NER, "train.txt"))
  assert tagging_data.label_list(train) == ["O", "I-LOC", "I-PER"]
  assert len({s.document for s in train}) == 188



@pytest.mark.parametrize("bad_line, tag, scheme", [
    ("Paris PER", "PER", "IOB2"),          # a tag without prefix: a label of its own
    ("Paris b-loc", "b-loc", "IOB2"),      # case
    ("Paris B-", "B-", "IOB2"),            # no type
    ("Paris X-LOC", "X-LOC", "IOB2"),      # unknown prefix
    ("Paris S-LOC", "S-LOC", "IOB2"),      # another scheme's prefix
])
def test_a_tag_outside_the_files_scheme_is_refused_with_file_and_line(tmp_path, bad_line, tag,
                                                                     scheme):
  path = tmp_path / "train.txt"
  path.write_text("-DOCSTART- O\n\nJohn B-PER\nSmith I-PER\nvisits O\n" + bad_line +
                  "\n\nAnna B-PER\nlives O\nin O\nRome B-LOC\n", encoding="utf-8")
  for labelled in (True, None):
    with pytest.raises(tagging_data.ConllFormatError) as e:
      tagging_data.read_conll(str(path), labelled=labelled)
    assert str(e.value).startswith(f"{path}:6: tag {tag!r} (word 'Paris') is outside the "
                                   f"{scheme} scheme the other tags use")
  # Plain tags with one prefixed tag among them; an IOBES file with an IOB-style entity.
  path.write_text("The DT\ncat NN\n\nsat VBD\non B-PP\n", encoding="utf-8")
  with pytest.raises(tagging_data.ConllFormatError, match=r"train\.txt:5: tag 'B-PP' \(word "
                     r"'on'\) has a scheme prefix, but the other tags are plain"):
    tagging_data.read_conll(str(path))
  path.write_text("a S-PER\nb O\nc B-LOC\nd E-LOC\n\ne B-ORG\nf O\n", encoding="utf-8")
  with pytest.raises(tagging_data.ConllFormatError, match=r"train\.txt:6: tag 'B-ORG' \(word "
                     r"'e'\) ends an entity, which the IOBES scheme"):
    tagging_data.read_conll(str(path))


def test_an_i_tag_starting_an_entity_in_an_iob2_file_is_a_warning(tmp_path, caplog):
  path = tmp_path / "train.txt"
  path.write_text("John B-PER\nSmith I-PER\nin O\nParis I-LOC\n\nRome B-LOC\n",
                  encoding="utf-8")
  sentences = tagging_data.read_conll(str(path))
  assert [s.tags for s in sentences] == [("B-PER", "I-PER", "O", "I-LOC"), ("B-LOC",)]
  assert f"{path}:4: tag 'I-LOC' (word 'Paris') starts an entity, which the IOB2 scheme the " \
      "other tags use does with B-" in caplog.text
  assert "read as IOB1" in caplog.text

# === Alignment ===


def _collect(sentences, label_map, max_seq_length, tok, document_context=False):
  out, stats = [], {}
  tagging_data.convert_sentences_to_features(sentences, label_map, max_seq_length, tok,
                                             out.append, document_context, stats)
  return out, stats


def test_readme_alignment_first_piece_carries_the_label(tokenizer):
  """The original README's word-level example: orig_to_tok_map [1, 2, 4, 6]."""
  sentence = tagging_data.Sentence(("John", "Johanson", "'s", "house"),
                                   ("B-PER", "I-PER", "O", "O"), 0, 1)
  labels = {"O": 0, "B-PER": 1, "I-PER": 2}
  (feature,), stats = _collect([sentence], labels, 16, tokenizer)
  tokens = tokenizer.convert_ids_to_tokens(feature.input_ids[:8])
  assert tokens == ["[CLS]", "john", "johan", "##son", "'", "s", "house", "[SEP]"]
  assert feature.word_positions == [(0, 1), (1, 2), (2, 4), (3, 6)]
  assert feature.label_mask == [0, 1, 1, 0, 1, 0, 1, 0] + [0] * 8
  assert feature.label_ids == [0, 1, 2, 0, 0, 0, 0, 0] + [0] * 8
  assert feature.input_mask == [1] * 8 + [0] * 8
  assert feature.segment_ids == [0] * 16
  assert stats == dict(sentences=1, windows=1, split_sentences=0, words=4, empty_words=0)


def test_a_word_that_tokenizes_to_nothing_is_one_unk(tokenizer):
  sentence = tagging_data.Sentence(("a", "\u0301", "b"), ("O", "B-X", "O"), 0, 1)
  (feature,), stats = _collect([sentence], {"O": 0, "B-X": 1}, 8, tokenizer)
  assert tokenizer.convert_ids_to_tokens(feature.input_ids[:5]) == [
      "[CLS]", "a", "[UNK]", "b", "[SEP]"]
  assert feature.label_ids[2] == 1 and stats["empty_words"] == 1


# === Windows ===


def test_plan_windows_hand_cases():
  # Fits: one window, centred in the context and moved inside it.
  assert tagging_data.plan_windows(10, 0, 10, 10) == [(0, 0, 10)]
  assert tagging_data.plan_windows(100, 40, 46, 10) == [(38, 40, 46)]
  assert tagging_data.plan_windows(100, 0, 4, 10) == [(0, 0, 4)]
  assert tagging_data.plan_windows(100, 96, 100, 10) == [(90, 96, 100)]
  # Longer than a window: parts of budget // 2, windows a quarter before each part.
  assert tagging_data.plan_windows(25, 0, 25, 10) == [
      (0, 0, 5), (3, 5, 10), (8, 10, 15), (13, 15, 20), (15, 20, 25)]
  with pytest.raises(ValueError):
    tagging_data.plan_windows(3, 0, 3, 0)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=40),
       st.integers(0, 20), st.integers(0, 20), st.integers(1, 30))
def test_every_word_is_predicted_once_inside_its_window(pieces, before, after, budget):
  """Whatever the lengths: the windows' parts cover each word's first piece exactly once, and
  every window holds its part (the part's first pieces lie inside it)."""
  firsts = list(np.cumsum([0] + pieces[:-1]) + before)
  total = before + sum(pieces) + after
  windows = tagging_data.plan_windows(total, before, before + sum(pieces), budget)
  owners = [[w for w, (_, lo, hi) in enumerate(windows) if lo <= f < hi] for f in firsts]
  assert all(len(o) == 1 for o in owners)
  for start, lo, hi in windows:
    assert 0 <= start <= max(0, total - budget)
    assert all(start <= f < start + budget for f in firsts if lo <= f < hi)


def test_long_sentences_split_and_document_context(tokenizer):
  train = tagging_data.read_conll(os.path.join(NER, "train.txt"))[:40]
  labels = {t: i for i, t in enumerate(tagging_data.label_list(train))}
  for document_context in (False, True):
    features_list, stats = _collect(train, labels, 24, tokenizer, document_context)
    assert stats["split_sentences"] > 5
    assert stats["windows"] == len(features_list) > len(train)
    # Gold ids as "predictions" give back every gold tag: each word exactly once.
    ids = np.array([f.label_ids for f in features_list])
    back = tagging_data.word_predictions(features_list, ids, train, list(labels))
    assert back == [list(s.tags) for s in train]
    assert sum(sum(f.label_mask) for f in features_list) == stats["words"]
  # With document context a short sentence's window is filled from its neighbours.
  short = [i for i, s in enumerate(train) if len(s.words) < 8 and
           sum(t.document == s.document for t in train) > 1]
  alone, _ = _collect(train, labels, 64, tokenizer, False)
  packed, _ = _collect(train, labels, 64, tokenizer, True)
  for i in short:
    assert sum(alone[i].input_mask) < sum(packed[i].input_mask)
    assert sum(packed[i].label_mask) == len(train[i].words)


def test_word_predictions_refuses_gaps_and_doubles(tokenizer):
  sentences = tagging_data.parse_conll("a O\nb O\n", "f")
  (feature,), _ = _collect(sentences, {"O": 0}, 8, tokenizer)
  with pytest.raises(ValueError, match="predicted twice"):
    tagging_data.word_predictions([feature, feature], np.zeros([2, 8], int), sentences, ["O"])
  feature.word_positions = feature.word_positions[:1]
  with pytest.raises(ValueError, match="has no prediction"):
    tagging_data.word_predictions([feature], np.zeros([1, 8], int), sentences, ["O"])


# === Records and output ===


def test_records_hold_the_features(tmp_path, tokenizer):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.training import input_pipeline  # pylint: disable=g-import-not-at-top
  sentences = tagging_data.read_conll(os.path.join(NER, "dev.txt"))[:10]
  labels = {t: i for i, t in enumerate(["O", "I-LOC", "I-PER"])}
  path = str(tmp_path / "eval.tf_record")
  with tagging_data.FeatureWriter(path, keep=True) as writer:
    tagging_data.convert_sentences_to_features(sentences, labels, 32, tokenizer, writer)
  assert writer.num_features == len(writer.features) >= 10
  spec = input_pipeline.parsing_spec(tagging_data.record_spec(32))
  for record, feature in zip(tf.data.TFRecordDataset(path), writer.features):
    parsed = tf.io.parse_single_example(record, spec)
    for name in tagging_data.RECORD_FIELDS:
      assert parsed[name].numpy().tolist() == getattr(feature, name)
    assert record.numpy() == tagging_data.serialize_feature(feature)
  batches = list(input_pipeline.record_dataset(path, spec, 4, is_training=False,
                                               num_examples=writer.num_features))
  index = np.concatenate([b["example_index"].numpy() for b in batches])
  assert index.tolist() == list(range(writer.num_features)) + [-1] * (-writer.num_features % 4)


def test_a_failed_conversion_leaves_no_file(tmp_path, tokenizer):
  sentences = tagging_data.parse_conll("a O\nb B-NEW\n", "f")
  path = tmp_path / "train.tf_record"
  with pytest.raises(KeyError):
    with tagging_data.FeatureWriter(str(path)) as writer:
      tagging_data.convert_sentences_to_features(sentences, {"O": 0}, 8, tokenizer, writer)
  assert os.listdir(tmp_path) == []


def test_predictions_are_written_for_conlleval():
  sentences = tagging_data.parse_conll("EU I-ORG\nrejects O\n\nBonn I-LOC\n", "f")
  text = tagging_data.format_predictions(sentences, [["I-ORG", "O"], ["O"]])
  assert text == "EU I-ORG I-ORG\nrejects O O\n\nBonn I-LOC O\n\n"
  unlabelled = tagging_data.parse_conll("EU\n", "f", labelled=None)
  assert tagging_data.format_predictions(unlabelled, [["B-ORG"]]) == "EU B-ORG\n\n"
