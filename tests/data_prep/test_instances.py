"""Tests for bert_tf/data/instances.py: the original's instance algorithm, draw for draw.

The golden tests recompute the original script's outputs (tests/data/cpd_golden.json, from
/work/shared/data/golden) and compare an md5 over every record; the unit tests compare each
step with a straightforward transcription of ORIGINAL_RELEASE.md section 4 on token strings.
"""

import hashlib
import json
import os
import random

import pytest
from hypothesis import given, settings, strategies as st

from bert_tf import record_schema
from bert_tf import tokenization
from bert_tf.data import corpus
from bert_tf.data import instances as I

from tests.helpers import TEST_DATA

VOCAB_FILE = os.path.join(TEST_DATA, "vocab_uncased.txt")


@pytest.fixture(scope="module")
def tokenizer():
  return tokenization.FullTokenizer(VOCAB_FILE, do_lower_case=True)


@pytest.fixture(scope="module")
def vocab(tokenizer):
  return I.VocabTables(tokenizer.vocab, VOCAB_FILE)


@pytest.fixture(scope="module")
def golden():
  with open(os.path.join(TEST_DATA, "cpd_golden.json")) as f:
    return json.load(f)


# === Reference transcriptions (token strings, list deletions: the spec read literally) ===


def reference_masking(tokens, masked_lm_prob, max_predictions, vocab_words, whole_word, rng):
  cand = []
  for i, t in enumerate(tokens):
    if t in ("[CLS]", "[SEP]"):
      continue
    if whole_word and cand and t.startswith("##"):
      cand[-1].append(i)
    else:
      cand.append([i])
  rng.shuffle(cand)
  n = min(max_predictions, max(1, int(round(len(tokens) * masked_lm_prob))))
  out = list(tokens)
  chosen = []
  covered = set()
  for group in cand:
    if len(chosen) >= n:
      break
    if len(chosen) + len(group) > n or any(i in covered for i in group):
      continue
    for i in group:
      covered.add(i)
      if rng.random() < 0.8:
        out[i] = "[MASK]"
      elif rng.random() < 0.5:
        out[i] = tokens[i]
      else:
        out[i] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
      chosen.append((i, tokens[i]))
  chosen.sort()
  return out, [i for i, _ in chosen], [t for _, t in chosen]


def reference_truncate(a, b, max_num_tokens, rng):
  a, b = list(a), list(b)
  while len(a) + len(b) > max_num_tokens:
    longer = a if len(a) > len(b) else b
    if rng.random() < 0.5:
      del longer[0]
    else:
      longer.pop()
  return a, b


# === Random draws ===


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 700), seed=st.integers(0, 2**32 - 1))
def test_shuffle_matches_random_shuffle(n, seed):
  ours, theirs = list(range(n)), list(range(n))
  rng_ours, rng_theirs = random.Random(seed), random.Random(seed)
  I.shuffle(ours, rng_ours)
  rng_theirs.shuffle(theirs)
  assert ours == theirs
  assert rng_ours.getstate() == rng_theirs.getstate()


def test_shuffle_defers_to_subclasses():
  class Fixed(random.Random):
    def shuffle(self, x):
      x.reverse()
  items = [1, 2, 3]
  I.shuffle(items, Fixed(0))
  assert items == [3, 2, 1]


def test_num_to_predict_rounds_half_to_even():
  assert [I.num_to_predict(n, 0.15, 20) for n in (30, 70, 110, 128, 5)] == [4, 10, 16, 19, 1]
  assert I.num_to_predict(512, 0.15, 20) == 20
  assert I.num_to_predict(3, 0.01, 20) == 1


@settings(max_examples=200, deadline=None)
@given(len_a=st.integers(1, 300), len_b=st.integers(1, 300), max_num=st.integers(2, 200),
       seed=st.integers(0, 2**31))
def test_truncate_matches_reference(len_a, len_b, max_num, seed):
  a, b = list(range(len_a)), list(range(1000, 1000 + len_b))
  rng1, rng2 = random.Random(seed), random.Random(seed)
  a_start, a_stop, b_start, b_stop = I.truncate_seq_pair(len_a, len_b, max_num, rng1)
  ref_a, ref_b = reference_truncate(a, b, max_num, rng2)
  assert (a[a_start:a_stop], b[b_start:b_stop]) == (ref_a, ref_b)
  assert rng1.getstate() == rng2.getstate()


# === Masking ===


@settings(max_examples=150, deadline=None)
@given(data=st.data(), whole_word=st.booleans(), seed=st.integers(0, 2**31),
       prob=st.sampled_from([0.15, 0.3, 0.5, 1.0]), max_pred=st.integers(1, 30))
def test_masking_matches_reference(tokenizer, vocab, data, whole_word, seed, prob, max_pred):
  words = list(tokenizer.vocab)
  # A realistic mix: plenty of "##" pieces so whole-word groups form, also right after [SEP].
  pick = st.sampled_from(["the", "##s", "##ing", "un", "##ed", "##able", "[UNK]", "a", ".",
                         "the", "##s", "a", "[SEP]", "[CLS]"])  # specials: the general path
  len_a = data.draw(st.integers(1, 40))
  len_b = data.draw(st.integers(1, 40))
  a = data.draw(st.lists(pick, min_size=len_a, max_size=len_a))
  b = data.draw(st.lists(pick, min_size=len_b, max_size=len_b))
  tokens = ["[CLS]"] + a + ["[SEP]"] + b + ["[SEP]"]
  ids = tokenizer.convert_tokens_to_ids(tokens)
  options = I.InstanceOptions(max_seq_length=128, max_predictions_per_seq=min(max_pred, 125),
                              masked_lm_prob=prob, do_whole_word_mask=whole_word)
  rng1, rng2 = random.Random(seed), random.Random(seed)
  out_ids, positions, labels = I.create_masked_lm_predictions(ids, options, vocab, rng1)
  ref_out, ref_pos, ref_labels = reference_masking(
      tokens, prob, options.max_predictions_per_seq, words, whole_word, rng2)
  assert out_ids == tokenizer.convert_tokens_to_ids(ref_out)
  assert positions == ref_pos
  assert labels == tokenizer.convert_tokens_to_ids(ref_labels)
  assert rng1.getstate() == rng2.getstate()
  assert ids == tokenizer.convert_tokens_to_ids(tokens)  # input not modified


def _forward_shuffle(items, rng):
  """Fisher-Yates from the front, each index uniform by rejection sampling on getrandbits."""
  for i in range(len(items) - 1):
    span = len(items) - i
    j = rng.getrandbits(span.bit_length())
    while j >= span:
      j = rng.getrandbits(span.bit_length())
    items[i], items[i + j] = items[i + j], items[i]


@settings(max_examples=100, deadline=None)
@given(data=st.data(), whole_word=st.booleans(), seed=st.integers(0, 2**31),
       prob=st.sampled_from([0.15, 0.3, 1.0]), max_pred=st.integers(1, 30))
def test_lazy_draws_choose_what_a_full_shuffle_would(tokenizer, vocab, data, whole_word, seed,
                                                     prob, max_pred):
  # exact_draws=False draws only the front of a forward shuffle: with the same generator its
  # chosen positions are those of the full forward shuffle walked the original's way.
  pick = st.sampled_from(["the", "##s", "##ing", "un", "##ed", "a", ".", "[SEP]"])
  a = data.draw(st.lists(pick, min_size=1, max_size=40))
  b = data.draw(st.lists(pick, min_size=1, max_size=40))
  tokens = ["[CLS]"] + a + ["[SEP]"] + b + ["[SEP]"]
  ids = tokenizer.convert_tokens_to_ids(tokens)
  options = I.InstanceOptions(max_seq_length=128, max_predictions_per_seq=max_pred,
                              masked_lm_prob=prob, do_whole_word_mask=whole_word,
                              exact_draws=False)
  out, positions, labels = I.create_masked_lm_predictions(ids, options, vocab,
                                                          random.Random(seed))
  groups = []
  for i, t in enumerate(tokens):
    if t not in ("[CLS]", "[SEP]"):
      if whole_word and groups and t.startswith("##"):
        groups[-1].append(i)
      else:
        groups.append([i])
  _forward_shuffle(groups, random.Random(seed))
  target = I.num_to_predict(len(tokens), prob, max_pred)
  chosen = []
  for group in groups:
    if len(chosen) >= target:
      break
    if len(chosen) + len(group) <= target:
      chosen.extend(group)
  assert positions == sorted(chosen)
  assert labels == [ids[p] for p in positions]
  assert all(o == i for p, (o, i) in enumerate(zip(out, ids)) if p not in chosen)


def test_sample_in_place_is_uniform():
  # Every ordered pair of 5 items is equally likely at the front (20 outcomes).
  rng = random.Random(0)
  counts = {}
  trials = 20000
  for _ in range(trials):
    items = list(range(5))
    I.sample_in_place(items, 2, rng)
    assert sorted(items) == list(range(5))
    counts[tuple(items[:2])] = counts.get(tuple(items[:2]), 0) + 1
  assert len(counts) == 20
  # Binomial(20000, 1/20): sd about 31, so 5 sd is +-155.
  assert all(abs(c - trials / 20) < 155 for c in counts.values()), counts
  # count >= len: a full permutation; an empty or one-item list is left alone.
  items = list(range(7))
  I.sample_in_place(items, 50, rng)
  assert sorted(items) == list(range(7))
  for items in ([], [3]):
    before = list(items)
    I.sample_in_place(items, 2, rng)
    assert items == before


def test_whole_word_group_crosses_sep_like_the_original(tokenizer, vocab):
  # "##s" at the start of B joins the last word of A, across [SEP] (the original's quirk).
  tokens = ["[CLS]", "cat", "[SEP]", "##s", "[SEP]"]
  ids = tokenizer.convert_tokens_to_ids(tokens)
  options = I.InstanceOptions(max_predictions_per_seq=2, masked_lm_prob=0.4,
                              do_whole_word_mask=True)
  for seed in range(20):
    _, positions, labels = I.create_masked_lm_predictions(ids, options, vocab,
                                                          random.Random(seed))
    assert positions == [1, 3]
    assert labels == tokenizer.convert_tokens_to_ids(["cat", "##s"])


def test_masking_proportions(tokenizer, vocab):
  ids = tokenizer.convert_tokens_to_ids(["[CLS]"] + ["the"] * 62 + ["[SEP]"] + ["a"] * 61 +
                                        ["[SEP]"])
  options = I.InstanceOptions()
  rng = random.Random(1)
  mask = kept = other = 0
  for _ in range(400):
    out, positions, labels = I.create_masked_lm_predictions(ids, options, vocab, rng)
    assert len(positions) == 19  # round(128 * 0.15)
    assert 0 not in positions and 63 not in positions and 125 not in positions
    for p, label in zip(positions, labels):
      assert label == ids[p]
      mask += out[p] == vocab.mask_id
      kept += out[p] == ids[p]
      other += out[p] not in (vocab.mask_id, ids[p])
  total = mask + kept + other
  assert abs(mask / total - 0.8) < 0.02
  assert abs(kept / total - 0.1) < 0.02
  assert abs(other / total - 0.1) < 0.02


def test_chinese_characters_never_join_whole_word_groups(tokenizer):
  # The original's whole-word masking relies on "##" pieces; CJK characters are words of their
  # own, so for Chinese text it changes nothing (only embedded Latin words get groups).
  with open(os.path.join(TEST_DATA, "cpd_zh_60k.txt"), encoding="utf-8") as f:
    lines = [next(f) for _ in range(400)]
  pieces = [t for line in lines for t in tokenizer.tokenize(line)]
  cjk = [t for t in pieces if any(tokenization.is_cjk_codepoint(ord(c)) for c in t)]
  assert len(cjk) > 1000
  assert not [t for t in cjk if t.startswith("##")]


def _segment_cjk(line, rng):
  """Puts a space between some pairs of adjacent CJK characters: a stand-in word segmenter."""
  out = [line[0]] if line else []
  for prev, char in zip(line, line[1:]):
    if (tokenization.is_cjk_codepoint(ord(prev)) and tokenization.is_cjk_codepoint(ord(char))
        and rng.random() < 0.5):
      out.append(" ")
    out.append(char)
  return "".join(out)


def test_tag_words_keeps_the_tokens_and_tags_word_continuations(tokenizer, vocab):
  with open(os.path.join(TEST_DATA, "cpd_zh_60k.txt"), encoding="utf-8") as f:
    lines = [next(f).strip() for _ in range(300)]
  tag = I.tag_words(tokenizer.tokenize_to_ids, vocab.size)
  rng = random.Random(0)
  tagged_total = 0
  for line in lines:
    segmented = _segment_cjk(line, rng)
    tagged = tag(segmented)
    # Spaces between CJK characters change no token; the tags only mark word continuations.
    assert [i % vocab.size for i in tagged] == tokenizer.tokenize_to_ids(line)
    starts = [t < vocab.size for t in tagged]
    expected = []
    for word in segmented.split(" "):
      ids = tokenizer.tokenize_to_ids(word)
      expected += [True] + [False] * (len(ids) - 1) if ids else []
    assert starts == expected
    tagged_total += starts.count(False)
  assert tagged_total > 1000
  assert tag("北京 大学") == tokenizer.convert_tokens_to_ids(["北"]) + [
      tokenizer.vocab["京"] + vocab.size, tokenizer.vocab["大"],
      tokenizer.vocab["学"] + vocab.size]


@pytest.mark.parametrize("exact_draws", [True, False])
def test_segmented_words_are_masked_whole(tokenizer, vocab, exact_draws):
  tag = I.tag_words(tokenizer.tokenize_to_ids, vocab.size)
  a = tag("北京 大学 的 图书馆 很 大")
  # B starts with a word continuation, as after truncation from the front: that character is
  # a group of its own, never joined to A's last word across [SEP].
  b = [tokenizer.vocab["学"] + vocab.size] + tag("我们 喜欢 读书 unbelievable")
  ids = [vocab.cls_id] + a + [vocab.sep_id] + b + [vocab.sep_id]
  words = []  # positions of each word (tagged ids continue the previous one)
  for p, t in enumerate(ids):
    if t in (vocab.cls_id, vocab.sep_id):
      continue
    if t >= vocab.size and words and words[-1][-1] == p - 1:
      words[-1].append(p)
    elif vocab.is_continuation[t] and t < vocab.size and words:
      words[-1].append(p)  # "##" pieces of unbelievable
    else:
      words.append([p])
  assert [len(w) for w in words] == [2, 2, 1, 3, 1, 1, 1, 2, 2, 2, len(tokenizer.tokenize(
      "unbelievable"))]
  options = I.InstanceOptions(masked_lm_prob=0.4, max_predictions_per_seq=10,
                              do_whole_word_mask=True, word_tags=True, exact_draws=exact_draws)
  untagged = [t % vocab.size for t in ids]
  seen = set()
  for seed in range(300):
    out, positions, labels = I.create_masked_lm_predictions(ids, options, vocab,
                                                            random.Random(seed))
    assert max(out) < vocab.size and labels == [untagged[p] for p in positions]
    assert all(o == u for p, (o, u) in enumerate(zip(out, untagged)) if p not in positions)
    chosen = set(positions)
    for word in words:
      assert chosen.issuperset(word) or chosen.isdisjoint(word), (seed, word, positions)
      if chosen.issuperset(word):
        seen.add(tuple(word))
  assert len(seen) == len(words)  # every word gets masked some time
  with pytest.raises(I.InstanceOptionsError, match="--segmented_input .* --do_whole_word_mask"):
    I.InstanceOptions(word_tags=True)


# === Options ===


@pytest.mark.parametrize("kwargs, flag", [
    (dict(max_seq_length=4), "--max_seq_length"),
    (dict(max_seq_length=513), "--max_seq_length"),
    (dict(masked_lm_prob=0.0), "--masked_lm_prob"),
    (dict(masked_lm_prob=1.5), "--masked_lm_prob"),
    (dict(max_seq_length=16, max_predictions_per_seq=14), "--max_predictions_per_seq"),
    (dict(max_predictions_per_seq=0), "--max_predictions_per_seq"),
    (dict(dupe_factor=0), "--dupe_factor"),
    (dict(short_seq_prob=-0.1), "--short_seq_prob"),
])
def test_bad_options_name_the_flag(kwargs, flag):
  with pytest.raises(I.InstanceOptionsError, match=flag):
    I.InstanceOptions(**kwargs)


def test_vocab_without_special_tokens_is_rejected():
  with pytest.raises(ValueError, match=r"my_vocab.*\[MASK\]"):
    I.VocabTables({"[CLS]": 0, "[SEP]": 1, "a": 2}, source="my_vocab")


# === Reading text ===


def test_read_documents_follows_the_original(tmp_path, tokenizer):
  first = tmp_path / "a.txt"
  second = tmp_path / "b.txt"
  # Whitespace-only and token-less lines are dropped; consecutive blank lines make no empty
  # document; the last document of a.txt runs on into b.txt (no blank line between them).
  first.write_bytes(b"Hello world.\r\n  \n\n\nSecond doc.\n\x01\x02\nmore\n")
  second.write_bytes(b"continued here\n\nlast one")
  docs, report = I.read_documents([str(first), str(second)], tokenizer.tokenize)
  assert docs == [
      [["hello", "world", "."]],
      [["second", "doc", "."], ["more"], ["continued", "here"]],
      [["last", "one"]],
  ]
  assert (report.files, report.documents, report.segments, report.lines) == (2, 3, 5, 10)


def test_lines_are_tensorflows_readline_lines(tmp_path):
  """The original reads its corpus with tf.gfile.GFile.readline: lines end at "\\n" and lose
  every "\\r" (so "a\\rb" is one word there). Both readers give exactly its lines, the byte-range
  one from any split point, and count the lines where a "\\r" sits inside the text."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  data = (b"Hello world.\r\n\r\nA line\rwith text.\nOld\rMac\r\r ends.\r\r\n\n"
          b"\xc3\xa9t\xc3\xa9\r\xe2\x80\xa8x\n\nlast\rline\r")
  path = str(tmp_path / "cr.txt")
  with open(path, "wb") as f:
    f.write(data)
  with tf.io.gfile.GFile(path, "r") as f:
    original = list(f)
  assert "A linewith text.\n" in original  # TensorFlow's behaviour, which this test relies on
  report = corpus.ReadReport()
  assert list(corpus.iter_lines(path, "strict", report)) == original
  assert report.carriage_return_lines == 4
  for split in range(1, len(data)):
    lines, report = [], corpus.ReadReport()
    for start, end in ((0, split), (split, len(data))):
      lines += [line.strip() for line in corpus.iter_piece_lines(path, start, end, "strict",
                                                                  report)]
    kept = [line.strip() for line in original]
    assert [line for line in lines if line] == [line for line in kept if line], split
    assert report.carriage_return_lines == 4, split


def test_invalid_utf8_strict_names_file_and_line(tmp_path, tokenizer):
  path = tmp_path / "bad.txt"
  path.write_bytes(b"good line\nsecond\nbad \xff byte\n")
  with pytest.raises(corpus.InputError, match=r"bad\.txt:3: invalid UTF-8"):
    I.read_documents([str(path)], tokenizer.tokenize)


def test_invalid_utf8_replace_and_skip(tmp_path, tokenizer):
  path = tmp_path / "bad.txt"
  path.write_bytes(b"good line\nbad \xff byte\n")
  docs, report = I.read_documents([str(path)], tokenizer.tokenize, errors="replace")
  assert docs == [[["good", "line"], ["bad", "byte"]]]  # U+FFFD is deleted by the tokenizer
  assert (report.invalid_utf8_lines, report.skipped_lines) == (1, 0)
  docs, report = I.read_documents([str(path)], tokenizer.tokenize, errors="skip")
  assert docs == [[["good", "line"]]]
  assert (report.invalid_utf8_lines, report.skipped_lines) == (1, 1)


def test_empty_file_is_reported(tmp_path, tokenizer):
  empty = tmp_path / "empty.txt"
  empty.write_bytes(b"")
  docs, report = I.read_documents([str(empty)], tokenizer.tokenize)
  assert docs == [] and report.empty_files == [str(empty)]


def test_single_document_pairs_with_itself(tokenizer, vocab):
  # NSP needs two documents; with one, the ten tries fail and B comes from the same document.
  doc = [tokenizer.tokenize_to_ids(f"sentence number {i} is here.") for i in range(30)]
  options = I.InstanceOptions(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=1)
  out = I.create_training_instances([doc], options, vocab, random.Random(3))
  assert out and any(inst.is_random_next for inst in out)


def test_very_long_line_is_truncated_quickly(tokenizer, vocab):
  long_line = tokenizer.tokenize_to_ids("word " * 50000)
  docs = [[long_line], [tokenizer.tokenize_to_ids("short doc")]]
  options = I.InstanceOptions(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1)
  out = I.create_training_instances(docs, options, vocab, random.Random(0))
  assert out and all(len(inst.input_ids) <= 64 for inst in out)


# === Golden: the original script's outputs ===


@pytest.mark.parametrize("name", ["austen_s128_d2", "austen_s128_d2_wwm", "zh_s64_d1"])
def test_golden_outputs(golden, tokenizer, vocab, name):
  case = next(c for c in golden["outputs"] if c["name"] == name)
  docs, _ = I.read_documents([os.path.join(TEST_DATA, case["input_file"])],
                             tokenizer.tokenize_to_ids)
  options = I.InstanceOptions(
      max_seq_length=case["max_seq_length"],
      max_predictions_per_seq=case["max_predictions_per_seq"],
      masked_lm_prob=golden["masked_lm_prob"], short_seq_prob=golden["short_seq_prob"],
      dupe_factor=case["dupe_factor"], do_whole_word_mask=case["do_whole_word_mask"])
  encoder = record_schema.ExampleEncoder(options.max_seq_length, options.max_predictions_per_seq,
                                         vocab.size)
  made = I.create_training_instances(docs, options, vocab, random.Random(golden["random_seed"]))
  records = [encoder.encode(*inst) for inst in made]
  assert len(records) == case["instances"]
  # Decoded spot checks first: a mismatch there is far easier to read than an md5.
  expected = case["records_0_1_2_and_last"]
  for record, want in zip(records[:3] + records[-1:], expected):
    got = record_schema.decode_example(record, options.max_seq_length,
                                       options.max_predictions_per_seq)
    assert dict(got) == want
  assert hashlib.md5(b"".join(records)).hexdigest() == case["content_md5"]


def test_single_line_documents_are_always_random_next(tokenizer, vocab):
  # A one-segment chunk cannot be split into A and actual-next B: the original forces random
  # next (without drawing the 50% coin).
  docs = [[tokenizer.tokenize_to_ids(f"document {i} has just this one line .")]
          for i in range(20)]
  options = I.InstanceOptions(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2)
  out = I.create_training_instances(docs, options, vocab, random.Random(9))
  assert len(out) == 40
  assert all(inst.is_random_next for inst in out)


def test_text_blocks_share_out_the_bytes_read(tmp_path):
  """Each block carries its share of its window's input bytes (the progress line's measure of
  the text made into records): the shares add up to the file, the first block holds a part."""
  from bert_tf.data import corpus  # pylint: disable=g-import-not-at-top
  from bert_tf.data import instances  # pylint: disable=g-import-not-at-top
  path = tmp_path / "c.txt"
  path.write_text("".join(f"Sentence {i} of document {i // 7}, with some words.\n"
                          + ("\n" if i % 7 == 6 else "") for i in range(700)), encoding="utf-8")
  size = path.stat().st_size
  report = corpus.ReadReport()
  blocks = list(instances.iter_text_blocks([str(path)], [size], 2000, "strict", report,
                                           window_blocks=4))
  shares = [share for _, _, share in blocks]
  assert len(blocks) > 8 and len({key[0] for key, _, _ in blocks}) > 1
  assert sum(shares) == pytest.approx(size, rel=1e-9) and report.bytes == size
  assert 0 < shares[0] < size / 4
