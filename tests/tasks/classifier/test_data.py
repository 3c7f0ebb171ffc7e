"""bert_tf.tasks.classifier.data against the facts of the original run_classifier.py: features
and records (its processors: classifier/test_processors.py).

Features are compared with a plain reference of the original's convert_single_example written
below (tokens from FullTokenizer.tokenize, the one-pop-at-a-time truncation), and the written
records with tf.train.Example(...).SerializeToString(deterministic=True) of the reference
features.
"""

import os
import random

import pytest
import tensorflow as tf

from bert_tf import tokenization
from bert_tf.tasks import pairs
from bert_tf.tasks.classifier import data as cd
from tests import helpers

VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")


@pytest.fixture(scope="module")
def tokenizer():
  return tokenization.FullTokenizer(VOCAB, do_lower_case=True)


@pytest.fixture(scope="module")
def corpus_lines():
  with open(os.path.join(helpers.TEST_DATA, "corpus_sample_lines.txt"), encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f if line.strip()]


# === Truncation and features ===


def reference_truncate(tokens_a, tokens_b, max_length):
  """The original's _truncate_seq_pair: one pop at a time from the longer list, B on a tie."""
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def reference_features(example, label_list, max_seq_length, tokenizer):
  """The original's convert_single_example, spelled out (tokens first, ids at the end)."""
  if isinstance(example, cd.PaddingInputExample):
    return [0] * max_seq_length, [0] * max_seq_length, [0] * max_seq_length, 0, 0
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = None
  if example.text_b:
    tokens_b = tokenizer.tokenize(example.text_b)
  if tokens_b:
    reference_truncate(tokens_a, tokens_b, max_seq_length - 3)
  elif len(tokens_a) > max_seq_length - 2:
    tokens_a = tokens_a[:max_seq_length - 2]
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  input_mask = [1] * len(input_ids)
  while len(input_ids) < max_seq_length:
    input_ids.append(0)
    input_mask.append(0)
    segment_ids.append(0)
  label_id = float(example.label) if label_list is None else \
      {label: i for i, label in enumerate(label_list)}[example.label]
  return input_ids, input_mask, segment_ids, label_id, 1


def as_tuple(features):
  return (features.input_ids, features.input_mask, features.segment_ids, features.label_id,
          int(features.is_real_example))


def test_truncated_pair_lengths_equal_the_pop_loop():
  for len_a in range(0, 14):
    for len_b in range(0, 14):
      for budget in range(0, 30):
        a, b = list(range(len_a)), list(range(len_b))
        reference_truncate(a, b, budget)
        assert pairs.truncated_pair_lengths(len_a, len_b, budget) == (len(a), len(b)), \
            (len_a, len_b, budget)
        a2, b2 = list(range(len_a)), list(range(len_b))
        pairs.truncate_seq_pair(a2, b2, budget)
        assert (a2, b2) == (a, b)


def random_text(rng, lines, max_lines=4):
  kind = rng.random()
  if kind < 0.1:
    return rng.choice(["", " ", "   \t ", "\u200b", "?!", "Café naïve résumé", "中文 字符 テスト"])
  if kind < 0.3:  # a slice of words: short texts, so ties and near-ties are common
    words = rng.choice(lines).split()
    start = rng.randrange(len(words))
    return " ".join(words[start:start + rng.randint(0, 6)])
  return " ".join(rng.choice(lines) for _ in range(rng.randint(1, max_lines)))


def test_convert_single_example_matches_the_reference(tokenizer, corpus_lines):
  rng = random.Random(20181031)
  labels = ["0", "1", "2"]
  checked = 0
  for n in range(1200):
    max_seq_length = rng.choice([3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 128])
    text_a = random_text(rng, corpus_lines, max_lines=8 if n % 5 == 0 else 3)
    choice = rng.random()
    if choice < 0.15:
      text_b = None
    elif choice < 0.2:
      text_b = ""
    elif choice < 0.3:
      text_b = text_a  # same tokens: every truncation step is a tie
    else:
      text_b = random_text(rng, corpus_lines, max_lines=8 if n % 7 == 0 else 3)
    example = cd.InputExample(f"r-{n}", text_a, text_b, rng.choice(labels))
    got = cd.convert_single_example(n, example, labels, max_seq_length, tokenizer)
    assert as_tuple(got) == reference_features(example, labels, max_seq_length, tokenizer), example
    checked += 1
  assert checked == 1200


@pytest.mark.parametrize("text_a,text_b,max_seq_length,expected", [
    # Ties pop from B first: A keeps 5, B 4.
    ("the the the the the the", "a a a a a a", 12, ("the " * 5, "a " * 4)),
    # Longer A: A is cut down to B's length, then the pops alternate, starting with B.
    ("the " * 20, "a a a", 8, ("the the the", "a a")),
    ("the " * 20, "a a a", 9, ("the the the", "a a a")),
    # Long B.
    ("a", "the " * 30, 10, ("a", "the " * 6)),
    # B that tokenizes to nothing, or "": single segment with the single-segment budget.
    ("the " * 10, "   ", 6, ("the " * 4, None)),
    ("the " * 10, "", 6, ("the " * 4, None)),
    ("the " * 10, "\u200b", 6, ("the " * 4, None)),
    # max_seq_length 4 leaves a budget of 1: B is popped empty, so the layout is single-segment.
    ("the", "a", 4, ("the", None)),
    # max_seq_length 3: both popped empty: [CLS] [SEP].
    ("the", "a", 3, ("", None)),
])
def test_layout_edge_cases(tokenizer, text_a, text_b, max_seq_length, expected):
  example = cd.InputExample("e", text_a, text_b, "1")
  got = cd.convert_single_example(0, example, ["0", "1"], max_seq_length, tokenizer)
  assert as_tuple(got) == reference_features(example, ["0", "1"], max_seq_length, tokenizer)
  want_a, want_b = (tokenizer.tokenize(t) if t is not None else None for t in expected)
  tokens = ["[CLS]"] + want_a + ["[SEP]"] + (want_b + ["[SEP]"] if want_b else [])
  n = len(tokens)
  assert got.input_ids == tokenizer.convert_tokens_to_ids(tokens) + [0] * (max_seq_length - n)
  assert got.segment_ids == [0] * (len(want_a) + 2) + [1] * (n - len(want_a) - 2) + \
      [0] * (max_seq_length - n)


def test_padding_labels_and_limits(tokenizer):
  padding = cd.convert_single_example(0, cd.PaddingInputExample(), ["a", "b"], 6, tokenizer)
  assert as_tuple(padding) == ([0] * 6, [0] * 6, [0] * 6, 0, 0)
  assert padding.is_real_example is False
  # The label id is the label's index in label_list.
  example = cd.InputExample("x", "hello", None, "b")
  assert cd.convert_single_example(0, example, ["b", "a"], 8, tokenizer).label_id == 0
  assert cd.convert_single_example(0, example, ["a", "b"], 8, tokenizer).label_id == 1
  with pytest.raises(ValueError, match=r"example x: unknown label 'b'; the label list is \['c'\]"):
    cd.convert_single_example(0, example, ["c"], 8, tokenizer)
  # Regression: label_list None, float labels.
  regression = cd.convert_single_example(0, cd.InputExample("s", "a", "b", "3.25"), None, 8,
                                         tokenizer)
  assert regression.label_id == 3.25
  # max_seq_length 2 holds a single segment ([CLS] [SEP]) but not a pair (the original crashed).
  single = cd.convert_single_example(0, cd.InputExample("t", "hello", None, "a"), ["a"], 2,
                                     tokenizer)
  assert single.input_ids == tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
  with pytest.raises(ValueError, match="max_seq_length >= 3"):
    cd.convert_single_example(0, cd.InputExample("t", "hello", "you", "a"), ["a"], 2, tokenizer)


def test_pad_for_tpu():
  examples = [cd.InputExample(str(i), "a") for i in range(10)]
  padded = cd.pad_for_tpu(examples, 8)
  assert padded is examples and len(padded) == 16
  assert all(isinstance(e, cd.PaddingInputExample) for e in padded[10:])
  assert len(cd.pad_for_tpu(padded, 8)) == 16
  assert len(cd.pad_for_tpu([], 8)) == 0
  with pytest.raises(ValueError, match="batch_size"):
    cd.pad_for_tpu(examples, 0)


# === Records ===


def reference_record(features, regression=False):
  ids, mask, segments, label_id, real = features

  def int64s(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  label = tf.train.Feature(float_list=tf.train.FloatList(value=[label_id])) if regression \
      else int64s([label_id])
  feature = {"input_ids": int64s(ids), "input_mask": int64s(mask),
             "segment_ids": int64s(segments), "label_ids": label,
             "is_real_example": int64s([real])}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
      deterministic=True)


def read_records(path):
  return [r.numpy() for r in tf.data.TFRecordDataset(path)]


def test_written_records_equal_the_reference_bytes(tmp_path, tokenizer, corpus_lines):
  rng = random.Random(7)
  labels = ["contradiction", "entailment", "neutral"]
  examples = []
  for n in range(300):
    text_b = rng.choice([None, "", random_text(rng, corpus_lines)])
    examples.append(cd.InputExample(f"w-{n}", random_text(rng, corpus_lines), text_b,
                                    rng.choice(labels)))
  cd.pad_for_tpu(examples, 64)
  assert len(examples) == 320
  path = str(tmp_path / "out" / "train.tf_record")
  assert cd.file_based_convert_examples_to_features(examples, labels, 48, tokenizer, path) == 320
  assert os.listdir(tmp_path / "out") == ["train.tf_record"]
  records = read_records(path)
  assert records == [reference_record(reference_features(e, labels, 48, tokenizer))
                     for e in examples]
  # The serialize_features helper gives the same bytes.
  features = cd.convert_single_example(9, examples[3], labels, 48, tokenizer)
  assert cd.serialize_features(features, 48) == records[3]
  # The records parse with the original's reading spec.
  spec = {"input_ids": tf.io.FixedLenFeature([48], tf.int64),
          "input_mask": tf.io.FixedLenFeature([48], tf.int64),
          "segment_ids": tf.io.FixedLenFeature([48], tf.int64),
          "label_ids": tf.io.FixedLenFeature([], tf.int64),
          "is_real_example": tf.io.FixedLenFeature([], tf.int64)}
  parsed = tf.io.parse_single_example(records[-1], spec)
  assert int(parsed["is_real_example"]) == 0 and int(parsed["input_mask"].numpy().sum()) == 0


class ListPathTokenizer(tokenization.FullTokenizer):
  """A FullTokenizer subclass: the converter then takes its list path (tokenize_to_ids)."""


@pytest.mark.parametrize("chunk_size,ascii_only", [(1, False), (7, False), (1024, False),
                                                   (1024, True)])
def test_packed_chunks_equal_the_list_path(tmp_path, monkeypatch, tokenizer, corpus_lines,
                                           chunk_size, ascii_only):
  # The packed path tokenizes a chunk at once and splits its bytes; it must write what the
  # per-example list path writes, for ASCII chunks (newlines, tabs, control characters, empty
  # texts, truncation) and chunks with non-ASCII texts alike, across chunk borders.
  monkeypatch.setattr(cd, "_CHUNK_SIZE", chunk_size)
  rng = random.Random(chunk_size)
  odd = ["", " ", "a\nb", "x\ty\x00z\x1f", "\x7fDEL", "\n", "1,2;3", "the\r\nend"]

  def text():
    while True:
      value = rng.choice(odd) if rng.random() < 0.1 else random_text(rng, corpus_lines)
      if value.isascii() or not ascii_only:
        return value

  examples = [cd.InputExample(f"p-{n}", text(), rng.choice([None, "", text()]),
                              rng.choice(["a", "b"])) for n in range(700)]
  texts = [t for e in examples for t in (e.text_a, e.text_b) if t]
  assert all(t.isascii() for t in texts) if ascii_only else not all(t.isascii() for t in texts)
  examples.insert(300, cd.PaddingInputExample())
  fast, slow = str(tmp_path / "fast.tf_record"), str(tmp_path / "slow.tf_record")
  assert cd.file_based_convert_examples_to_features(iter(examples), ["a", "b"], 24, tokenizer,
                                                    fast) == 701
  cd.file_based_convert_examples_to_features(examples, ["a", "b"], 24,
                                             ListPathTokenizer(VOCAB, do_lower_case=True), slow)
  fast_records = read_records(fast)
  assert fast_records == read_records(slow)
  assert fast_records[5] == reference_record(reference_features(examples[5], ["a", "b"], 24,
                                                                tokenizer))
  # Both paths truncated some examples and left others whole.
  lengths = [len(cd._Converter(["a"], 10**6, tokenizer).ids(e)[0])
             for e in examples if isinstance(e, cd.InputExample)]
  assert min(lengths) < 24 < max(lengths)


def test_examples_are_checked_in_order(tmp_path, tokenizer):
  # A text_a of None after an unknown label: the unknown label (the earlier example) is named.
  examples = [cd.InputExample("ok", "a", None, "0"), cd.InputExample("bad", "b", None, "7"),
              cd.InputExample("none", None, None, "0")]
  with pytest.raises(ValueError, match="example bad: unknown label '7'"):
    cd.file_based_convert_examples_to_features(examples, ["0", "1"], 8, tokenizer,
                                               str(tmp_path / "a.tf_record"))
  with pytest.raises(ValueError, match="example none: text_a is None"):
    cd.file_based_convert_examples_to_features(examples[2:] + examples[1:2], ["0", "1"], 8,
                                               tokenizer, str(tmp_path / "b.tf_record"))
  assert os.listdir(tmp_path) == []


def test_regression_records_store_a_float_label(tmp_path, tokenizer):
  examples = [cd.InputExample("s-0", "A plane is taking off.", "An air plane is taking off.",
                              5.0), cd.InputExample("s-1", "A man.", "A woman.", 0.6)]
  examples.append(cd.PaddingInputExample())
  path = str(tmp_path / "eval.tf_record")
  cd.file_based_convert_examples_to_features(examples, None, 16, tokenizer, path)
  assert read_records(path) == [reference_record(reference_features(e, None, 16, tokenizer),
                                                 regression=True) for e in examples[:2]] + [
      reference_record(([0] * 16, [0] * 16, [0] * 16, 0.0, 0), regression=True)]


def test_failed_conversion_leaves_no_output(tmp_path, tokenizer):
  examples = [cd.InputExample("ok", "a", None, "0"), cd.InputExample("bad", "b", None, "7")]
  path = str(tmp_path / "train.tf_record")
  with pytest.raises(ValueError, match="example bad: unknown label '7'"):
    cd.file_based_convert_examples_to_features(examples, ["0", "1"], 8, tokenizer, path)
  assert os.listdir(tmp_path) == []
