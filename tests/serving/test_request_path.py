"""The short paths a served request takes: an ASCII batch skips the tokenizer's Unicode passes,
a single text packs without a second segment, and a classifier export's single text skips the
empty second text. Each must give exactly what the general path gives."""

import os

import hypothesis
from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

from bert_tf import packing
from bert_tf import text
from bert_tf import tokenization
from tests import helpers

VOCAB = os.path.join(helpers.TEST_DATA, "vocab_uncased.txt")
TOKENIZERS = {lower: (text.InGraphTokenizer(VOCAB, do_lower_case=lower, drop_invalid_utf8=True),
                      tokenization.FullTokenizer(VOCAB, do_lower_case=lower))
              for lower in (True, False)}
# Every ASCII character, with the ones the Unicode passes would act on outside ASCII weighted up:
# capitals ("I" among them), controls that cleaning deletes, whitespace and punctuation.
_ASCII = st.one_of(st.characters(min_codepoint=0, max_codepoint=0x7F),
                   st.sampled_from("IiAZ\x00\x07\x1b\x7f\t\n\r\x0b\x0c .,!?'#[]"))
# A non-ASCII line in the same batch sends the whole batch down the general path.
_NON_ASCII = "café ÀI naïve 中文"


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(lines=st.lists(st.text(_ASCII, max_size=40), min_size=1, max_size=5))
def test_an_ascii_batch_gives_the_reference_ids_and_the_general_paths(lines):
  for fast, reference in TOKENIZERS.values():
    ascii_ids = fast.tokenize(tf.constant(lines)).to_list()
    general = fast.tokenize(tf.constant(lines + [_NON_ASCII])).to_list()
    assert ascii_ids == general[:-1]
    assert ascii_ids == [reference.tokenize_to_ids(line) for line in lines]
    words = fast.split_words(tf.constant(lines)).to_list()
    assert words == fast.split_words(tf.constant(lines + [_NON_ASCII])).to_list()[:-1]


def test_invalid_utf8_takes_the_general_path():
  fast, _ = TOKENIZERS[True]
  # \xff is not ASCII and not UTF-8: dropped, as the original's decode("utf-8", "ignore").
  ids = fast.tokenize(tf.constant([b"hel\xfflo world", b"hello world"])).to_list()
  assert ids[0] == ids[1]


def test_a_single_text_packs_as_a_pair_with_an_empty_second_text():
  """Packer.pack without ids_b (a Python int or a per-row seq_length; a static width, a
  bucket, None) against the pair layout with every B empty."""
  rng = np.random.default_rng(7)
  rows = [list(rng.integers(1000, 2000, rng.integers(0, 12))) for _ in range(40)]
  ids_a = tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1, row_splits_dtype=tf.int64)
  empty = tf.ragged.constant([[]] * len(rows), dtype=tf.int32, ragged_rank=1,
                             row_splits_dtype=tf.int64)
  seq = [int(s) for s in rng.integers(2, 16, len(rows))]
  for packer in (packing.Packer(VOCAB, True, 16),
                 packing.Packer(VOCAB, True, 16, length_buckets=(4, 8))):
    for take in (slice(0, 1), slice(0, 7), slice(None)):
      a, b = ids_a[take], empty[take]
      per_row = tf.constant(seq[take], tf.int32)
      cases = [(per_row, None), (per_row, 16), (per_row, tf.constant(13)), (9, 16), (9, None)]
      for seq_length, pad_to in cases:
        lengths = tf.fill([a.nrows()], seq_length) if isinstance(seq_length, int) else seq_length
        want = packer.pack(a, b, tf.cast(lengths, tf.int32), pad_to=pad_to)
        got = packer.pack(a, None, seq_length, pad_to=pad_to)
        for key, value in want.items():
          np.testing.assert_array_equal(got[key].numpy(), value.numpy(), err_msg=key)
          assert got[key].dtype == value.dtype
          assert got[key].shape.as_list() == value.shape.as_list(), key


def test_a_classifier_serves_a_single_text_as_classify_with_an_empty_text_b():
  """A single-text classifier's serving_default packs each text alone: the same outputs as
  its classify signature with every text_b empty (the original's single-segment rule)."""
  from bert_tf.tasks.classifier import head  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.classifier import serving_module  # pylint: disable=g-import-not-at-top
  from bert_tf import length_buckets  # pylint: disable=g-import-not-at-top
  packer = packing.Packer(VOCAB, True, 64, length_buckets=length_buckets.auto_buckets(64))
  config = helpers.tiny_config(max_position_embeddings=64, vocab_size=packer.tokenizer.vocab_size)
  tf.keras.utils.set_random_seed(5)
  model = head.build_classifier_model(config, 3)
  module = serving_module.ClassifierModule(packer, model, 64, ["a", "b", "c"], pair=False)
  texts = ["a short one.", "", "word " * 70, "Café naïve 中文 and more words"]
  for batch in ([texts[0]], texts):
    text = tf.constant(batch)
    single = module.serving_default(text)
    pair = module.classify(text, tf.fill([len(batch)], ""))
    assert sorted(single) == sorted(pair)
    for key, value in pair.items():
      np.testing.assert_array_equal(single[key].numpy(), value.numpy(), err_msg=key)
