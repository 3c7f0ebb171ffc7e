"""Makes the question-answering fixtures under tests/data/squad/ from ../shared/data/corpora.

Run by hand from anywhere (never by the tests: CI has no ../shared):

    .venv/bin/python tests/data/make_squad_fixtures.py [--corpora DIR] [--out DIR]

The output is deterministic (fixed seed, corpora read in a fixed order). The task is "find and
continue": a context is a run of consecutive lines (sentences) of one corpus document, and a
question is `What follows "<quote>"?`, where <quote> is 4 to 6 consecutive whitespace-separated
words of one sentence of the context; the answer is the next 1 to 3 words of that sentence. So
answers are known by construction and a small pretrained BERT can learn the task from a few
hundred examples. What it writes, all in the SQuAD JSON layout
{"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}]}]}]}]}:

* train-v1.1.json, dev-v1.1.json: version "1.1", 400 and 120 answerable questions, about a
  third from each corpus (Austen / Melville, World English Bible, Linux kernel docs; paragraphs
  take turns among the corpora). Train questions have exactly one answer; every third dev
  question lists its (same) answer twice, as SQuAD dev questions have several gold answers.
* train-v2.0.json, dev-v2.0.json: version "v2.0", 400 and 120 questions drawn afresh (dev
  answers doubled by the same rule), a third of them unanswerable: their quote is 4 to 6 words
  of a sentence of ANOTHER document of the same corpus and split, so it does not occur in the
  context. Every question has "is_impossible";
  unanswerable ones have "answers": [] (no "plausible_answers").
* edge-v2.0.json: 13 hand-checkable questions for reader edge cases, described below.

Contexts: 3 to 6 lines, 30 to 170 words; every tenth paragraph is a long one of 8 to 14 lines
and 180 to 450 words (several windows at max_seq_length 128 / doc_stride 64), whose first
answerable question quotes a sentence of its second half. Lines are joined by one space, but in
about a fifth of the paragraphs (at random) by "\\n", two spaces or " \\n ", chosen for each gap.
Every context line has no leading, trailing or repeated space, no other whitespace and no
control or format character (so the original reader's whitespace split and str.split() agree).
Each paragraph carries 1 to 3 questions. The quoted sentence of an answerable question occurs
only once in the three corpora, is 5 or more words long and is not a fragment of the splitter's
"Mr." breaks; no paragraph has two questions on the same sentence, and paragraphs of a document
never overlap.

Answers: the 1 to 3 words that follow the quote, cut after the first word that ends in
punctuation, with surrounding punctuation (.,;:!?"'`()[]{}<>, curly quotes and brackets, dashes
and "...") stripped; answer_start is moved with the stripping, so the text is exactly
context[answer_start:answer_start + len(text)]. Every answer word has a letter or digit, and no
answer is empty after the SQuAD normalisation (none is only "a", "an" or "the", which the
official v2.0 evaluator would take for "no answer"). The quote occurs exactly once in the
context (as a substring, overlaps counted), so the answer is unique.

Splits: each corpus's documents are shuffled once with the same seed and procedure as
make_classifier_fixtures.py (so the train / dev / test documents are the same as classifier/'s)
and train files draw only from train documents, dev files only from dev documents; test
documents are not used. Ids are "<corpus>-<document>-<line>-<k>": the 0-based document, the
0-based line in it where the context starts, and the question's index in the paragraph. Titles
are "<corpus>-<document>"; articles are in a shuffled order, paragraphs by line.

edge-v2.0.json (version "v2.0"; every answerable question has exactly one answer):

* austen-0000-0000: the opening of Emma, 3 lines. -0 asks 'What comes before "handsome, clever,
  and rich,"?' (not the usual template): "Emma Woodhouse" at answer_start 0, the very start.
  -1_bad_offset: "disposition" after "a comfortable home and happy", but answer_start is that of
  "existence" (in range, wrong text): the original reader, training, warns "Could not find
  answer" and skips it. -2_empty_question: question "", unanswerable. -3: unanswerable, quoting
  Moby-Dick ("little or no money in").
* bible-0000-0001: Genesis 1:2-5 joined by "\\n\\n", three spaces and " \\t\\n ". -0: "Darkness",
  just after the "\\n\\n"; -1: "God said", just after the three spaces; -2: "empty.\\n\\nDarkness"
  (an answer that spans the "\\n\\n" and holds a full stop).
* linux contexts with non-ASCII answers and answers next to punctuation: "Magnus Forsström"
  (before a comma); "Paraná" (inside "(both of C3SL/Federal University of Paraná)"); "Voß" (the
  last word of a sentence, before its full stop); "1988-1998" (from "(1988-1998)."); and "time",
  the last word of a context that ends without punctuation (answer ends at len(context)).
* empty-0000-0000-0_empty_context: context "", one unanswerable question.

The generator checks what it writes (read back from disk): answer texts equal their context
slices, quotes occur once in answerable contexts and never in unanswerable ones, ids are unique,
train and dev share no document, and a re-implementation of the original reader's answer check
(whitespace split, char-to-word offsets, the "Could not find answer" test) accepts every answer
except the _bad_offset one. It then prints counts and trivial baselines on the dev files with
the official SQuAD normalisation (lowercase, drop ASCII punctuation and a/an/the, collapse
whitespace; F1 on token multisets; v2.0: an empty gold list means the gold is "").
"""

import argparse
import json
import os
import random
import re
import string
import sys
import unicodedata
from collections import Counter

# The document reader and split of the classifier fixtures, so both use the same documents.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The same seed, hence the same document splits.
from make_classifier_fixtures import SEED, read_documents, split_documents  # noqa: E402  pylint: disable=wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CORPORA = os.path.join(os.path.dirname(REPO), "shared", "data", "corpora")
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "squad")

CORPORA = (("austen", "austen_moby.txt"), ("bible", "web_bible_books.txt"),
           ("linux", "linux_doc_en.txt"))
SIZES = {"train": 400, "dev": 120}
IMPOSSIBLE_FRACTION = 1 / 3
QUESTIONS_PER_PARAGRAPH = (1, 2, 3)
SHORT_LINES, SHORT_WORDS = (3, 6), (30, 170)
LONG_LINES, LONG_WORDS = (8, 14), (180, 450)
LONG_EVERY = 10  # paragraph p is long when p % LONG_EVERY == LONG_EVERY // 2
ODD_SPACING_FRACTION = 0.2
ODD_SEPARATORS = ("\n", "  ", " \n ")
QUOTE_WORDS = (4, 6)
ANSWER_WORDS = (1, 3)
MIN_SENTENCE_WORDS = QUOTE_WORDS[0] + 1
TEMPLATE = 'What follows "{}"?'
QUESTION_RE = re.compile(r'^What follows "(.*)"\?$', re.S)
ID_RE = re.compile(r"^[a-z]+-\d{4}-\d{4}-\d+(_bad_offset|_empty_question|_empty_context)?$")

# Stripped from both ends of an answer (never from inside it).
EDGE_PUNCTUATION = set(".,;:!?\"'`()[]{}<>\u2014\u2013\u2026")
EDGE_CATEGORIES = ("Ps", "Pe", "Pi", "Pf")  # brackets and curly quotes

_ABBREVIATION_END = re.compile(r"(?:^|\W)(?:Mr|Mrs|Ms|Dr|St|Messrs|viz|vs|e\.g|i\.e|etc)\.$")


def clean_line(line):
  """Usable in a context: words separated by single spaces, no other space or control char."""
  if not line or line != line.strip(" ") or "  " in line:
    return False
  for c in line:
    if c != " " and (c.isspace() or unicodedata.category(c)[0] in "CZ"):
      return False
  return True


def has_alnum(text):
  return any(c.isalnum() for c in text)


def is_edge_punctuation(c):
  return c in EDGE_PUNCTUATION or unicodedata.category(c) in EDGE_CATEGORIES


def count_occurrences(text, sub):
  """Occurrences of sub in text, overlapping ones included."""
  n, pos = 0, text.find(sub)
  while pos != -1:
    n += 1
    pos = text.find(sub, pos + 1)
  return n


class Corpus:

  def __init__(self, name, path, rng):
    self.name = name
    self.docs = read_documents(path)
    self.split_docs = split_documents(self.docs, rng)
    self.clean = [[clean_line(line) for line in lines] for lines in self.docs]
    self.quotable = None  # set by mark_quotable

  def mark_quotable(self, counts):
    """Lines a question may quote: clean, unique in all corpora, long enough, not a Mr. break."""
    self.quotable = []
    for lines, clean in zip(self.docs, self.clean):
      flags = []
      broken_before = False
      for line, ok in zip(lines, clean):
        broken_here = bool(_ABBREVIATION_END.search(line))
        flags.append(ok and not broken_here and not broken_before and counts[line] == 1
                     and len(line.split(" ")) >= MIN_SENTENCE_WORDS)
        broken_before = broken_here
      self.quotable.append(flags)

  def quotable_lines(self, split):
    return [(d, i) for d in self.split_docs[split] for i, ok in enumerate(self.quotable[d]) if ok]


def answer_after(context, quote_end, words):
  """(text, start) of `words` (whitespace words following the quote), trimmed of punctuation."""
  start = quote_end
  while context[start].isspace():
    start += 1
  end = start
  for k, word in enumerate(words):
    if k:
      while context[end].isspace():
        end += 1
    assert context.startswith(word, end)
    end += len(word)
  while start < end and is_edge_punctuation(context[start]):
    start += 1
  while end > start and is_edge_punctuation(context[end - 1]):
    end -= 1
  return context[start:end], start


def choose_answerable(rng, context, line_start, sentences):
  """(line, quote, answer text, answer_start) on one of `sentences` ((line, text) pairs), or None.

  line_start[j] is the character offset of the context's line j.
  """
  for _ in range(50):
    j, line = rng.choice(sentences)
    words = line.split(" ")
    n_quote = rng.randint(*QUOTE_WORDS)
    if len(words) < n_quote + 1:
      continue
    first = rng.randint(0, len(words) - n_quote - 1)
    quote = " ".join(words[first:first + n_quote])
    n_answer = min(rng.randint(*ANSWER_WORDS), len(words) - first - n_quote)
    answer_words = words[first + n_quote:first + n_quote + n_answer]
    for k, word in enumerate(answer_words[:-1]):
      if is_edge_punctuation(word[-1]):
        answer_words = answer_words[:k + 1]
        break
    if not has_alnum(quote) or not all(has_alnum(w) for w in answer_words):
      continue
    if count_occurrences(context, quote) != 1:
      continue
    quote_end = line_start[j] + len(" ".join(words[:first + n_quote]))
    assert context[quote_end - len(quote):quote_end] == quote
    text, start = answer_after(context, quote_end, answer_words)
    if has_alnum(text) and normalize_answer(text):
      return j, quote, text, start
  return None


def choose_impossible(rng, corpus, pool, doc, context):
  """A quote of a sentence of another document (from pool) that does not occur in context."""
  for _ in range(50):
    d, i = rng.choice(pool)
    words = corpus.docs[d][i].split(" ")
    n_quote = rng.randint(*QUOTE_WORDS)
    if d == doc or len(words) < n_quote:
      continue
    first = rng.randint(0, len(words) - n_quote)
    quote = " ".join(words[first:first + n_quote])
    if has_alnum(quote) and count_occurrences(context, quote) == 0:
      return quote
  raise RuntimeError(f"{corpus.name}: no quote for an unanswerable question in document {doc}")


def make_paragraph(rng, corpus, split, used_spans, long_one):
  """(doc, first line, lines, context, line offsets) of a fresh run of lines, or None."""
  n_lines = rng.randint(*(LONG_LINES if long_one else SHORT_LINES))
  min_words, max_words = LONG_WORDS if long_one else SHORT_WORDS
  doc = rng.choice(corpus.split_docs[split])
  lines = corpus.docs[doc]
  if len(lines) < n_lines:
    return None
  first = rng.randint(0, len(lines) - n_lines)
  span = set(range(first, first + n_lines))
  if span & used_spans.get(doc, set()):
    return None
  if not all(corpus.clean[doc][first:first + n_lines]):
    return None
  chosen = lines[first:first + n_lines]
  n_words = sum(len(line.split(" ")) for line in chosen)
  if not min_words <= n_words <= max_words:
    return None
  separators = [" "] * (n_lines - 1)
  if rng.random() < ODD_SPACING_FRACTION:
    separators = [rng.choice(ODD_SEPARATORS) for _ in separators]
  context, offsets = "", []
  for k, line in enumerate(chosen):
    if k:
      context += separators[k - 1]
    offsets.append(len(context))
    context += line
  used_spans.setdefault(doc, set()).update(span)
  return doc, first, chosen, context, offsets


def make_set(rng, corpora, split, n_questions, n_impossible):
  """A SQuAD dataset dict for one split. n_impossible=None: v1.1 (no is_impossible fields)."""
  v2 = n_impossible is not None
  labels = [True] * (n_impossible or 0) + [False] * (n_questions - (n_impossible or 0))
  rng.shuffle(labels)  # labels[q]: whether question q is unanswerable
  names = [name for name, _ in CORPORA]
  used_spans = {name: {} for name in names}
  pools = {name: corpora[name].quotable_lines(split) for name in names}
  articles = {}
  made = 0
  p = 0
  while made < n_questions:
    corpus = corpora[names[p % len(names)]]
    long_one = p % LONG_EVERY == LONG_EVERY // 2
    for _ in range(10000):
      para = make_paragraph(rng, corpus, split, used_spans[corpus.name], long_one)
      if para is None:
        continue
      doc, first, lines, context, offsets = para
      sentences = [(j, line) for j, line in enumerate(lines) if corpus.quotable[doc][first + j]]
      n_want = min(rng.choice(QUESTIONS_PER_PARAGRAPH), n_questions - made)
      if len(sentences) < n_want:
        used_spans[corpus.name][doc] -= set(range(first, first + len(lines)))
        continue
      break
    else:
      raise RuntimeError(f"{corpus.name} {split}: no paragraph found")
    qas = []
    free = list(sentences)
    for k in range(n_want):
      impossible = labels[made + k]
      qid = f"{corpus.name}-{doc:04d}-{first:04d}-{k}"
      if impossible:
        quote = choose_impossible(rng, corpus, pools[corpus.name], doc, context)
        qa = {"id": qid, "question": TEMPLATE.format(quote), "answers": [], "is_impossible": True}
      else:
        candidates = free
        if long_one and not any(not qa.get("is_impossible") for qa in qas):
          candidates = [s for s in free if s[0] >= len(lines) // 2] or free
        got = None
        for _ in range(20):
          got = choose_answerable(rng, context, offsets, candidates)
          if got:
            break
        if got is None:
          raise RuntimeError(f"{qid}: no answerable question found")
        line_of_quote, quote, text, start = got
        free = [s for s in free if s[0] != line_of_quote] or free
        answers = [{"text": text, "answer_start": start}]
        if split == "dev" and (made + k) % 3 == 0:
          answers.append(dict(answers[0]))
        qa = {"id": qid, "question": TEMPLATE.format(quote), "answers": answers}
        if v2:
          qa["is_impossible"] = False
      qas.append(qa)
    made += n_want
    p += 1
    title = f"{corpus.name}-{doc:04d}"
    articles.setdefault(title, []).append((first, {"context": context, "qas": qas}))
  titles = sorted(articles)
  rng.shuffle(titles)
  data = [{"title": t, "paragraphs": [para for _, para in sorted(articles[t], key=lambda x: x[0])]}
          for t in titles]
  return {"version": "v2.0" if v2 else "1.1", "data": data}


# ---------------------------------------------------------------------------------------------
# edge-v2.0.json


def find_line(corpus, needle):
  """(doc, line) of the one line of the corpus that starts with needle."""
  hits = [(d, i) for d, lines in enumerate(corpus.docs) for i, line in enumerate(lines)
          if line.startswith(needle)]
  if len(hits) != 1:
    raise RuntimeError(f"{corpus.name}: {len(hits)} lines start with {needle!r}")
  return hits[0]


def edge_context(corpus, needle, before, after, separators=None):
  """(doc, first line, context) of the line starting with needle and its neighbours."""
  doc, line = find_line(corpus, needle)
  first = line - before
  lines = corpus.docs[doc][first:line + after + 1]
  if first < 0 or len(lines) != before + after + 1 or not all(map(clean_line, lines)):
    raise RuntimeError(f"{corpus.name}: bad edge context around {needle!r}")
  separators = separators or [" "] * (len(lines) - 1)
  context = lines[0]
  for sep, text in zip(separators, lines[1:]):
    context += sep + text
  return doc, first, context


def edge_follows(qid, context, quote, text):
  """An answerable 'What follows' question whose answer is the text just after the quote."""
  assert count_occurrences(context, quote) == 1, (qid, quote)
  quote_end = context.index(quote) + len(quote)
  start = context.index(text, quote_end)
  gap = context[quote_end:start]
  assert all(c.isspace() or is_edge_punctuation(c) for c in gap), (qid, gap)
  return {"id": qid, "question": TEMPLATE.format(quote),
          "answers": [{"text": text, "answer_start": start}], "is_impossible": False}


def make_edge(corpora):
  austen, bible, linux = corpora["austen"], corpora["bible"], corpora["linux"]
  data = []

  doc, first, context = edge_context(austen, "Emma Woodhouse, handsome, clever", 0, 2)
  base = f"austen-{doc:04d}-{first:04d}"
  quote = "handsome, clever, and rich,"
  assert context.startswith("Emma Woodhouse, " + quote)
  start_q = {"id": f"{base}-0", "question": f'What comes before "{quote}"?',
             "answers": [{"text": "Emma Woodhouse", "answer_start": 0}], "is_impossible": False}
  bad = edge_follows(f"{base}-1_bad_offset", context, "a comfortable home and happy",
                     "disposition")
  bad["answers"][0]["answer_start"] = context.index("existence")
  empty_q = {"id": f"{base}-2_empty_question", "question": "", "answers": [],
             "is_impossible": True}
  moby = "little or no money in"
  moby_doc, moby_line = find_line(austen, "Some years ago--never mind how long precisely")
  assert moby in austen.docs[moby_doc][moby_line] and moby not in context
  impossible = {"id": f"{base}-3", "question": TEMPLATE.format(moby), "answers": [],
                "is_impossible": True}
  data.append({"title": f"austen-{doc:04d}", "paragraphs": [
      {"context": context, "qas": [start_q, bad, empty_q, impossible]}]})

  doc, first, context = edge_context(bible, "The earth was formless and empty.", 0, 3,
                                     ["\n\n", "   ", " \t\n "])
  base = f"bible-{doc:04d}-{first:04d}"
  data.append({"title": f"bible-{doc:04d}", "paragraphs": [{"context": context, "qas": [
      edge_follows(f"{base}-0", context, "was formless and empty.", "Darkness"),
      edge_follows(f"{base}-1", context, "surface of the waters.", "God said"),
      edge_follows(f"{base}-2", context, "The earth was formless and", "empty.\n\nDarkness"),
  ]}]})

  linux_cases = (
      ("The driver has been successfully tested by Magnus", 2, 1,
       "has been successfully tested by", "Magnus Forsstr\u00f6m"),
      ("In the end of 2007, Paulo Zanoni", 1, 1,
       "(both of C3SL/Federal University of", "Paran\u00e1"),
      ("It has been improved by comments from Johannes Berg", 1, 1,
       "Tsugikazu Shibata, and Jochen", "Vo\u00df"),
      ("The smpte240m standard was an interim standard", 2, 1,
       "the early days of HDTV", "1988-1998"),
      ("Availability is the probability that a system is operational", 2, 0,
       "operational at a given", "time"),
  )
  paragraphs = {}
  for needle, before, after, quote, text in linux_cases:
    doc, first, context = edge_context(linux, needle, before, after)
    qa = edge_follows(f"linux-{doc:04d}-{first:04d}-0", context, quote, text)
    paragraphs.setdefault(doc, []).append((first, {"context": context, "qas": [qa]}))
  end_doc = find_line(linux, linux_cases[-1][0])[0]
  end_para = paragraphs[end_doc][0][1]
  end_answer = end_para["qas"][0]["answers"][0]
  assert end_answer["answer_start"] + len(end_answer["text"]) == len(end_para["context"])
  for doc in sorted(paragraphs):
    data.append({"title": f"linux-{doc:04d}",
                 "paragraphs": [p for _, p in sorted(paragraphs[doc], key=lambda x: x[0])]})

  data.append({"title": "empty", "paragraphs": [{"context": "", "qas": [
      {"id": "empty-0000-0000-0_empty_context",
       "question": TEMPLATE.format("Emma Woodhouse, handsome, clever, and"), "answers": [],
       "is_impossible": True}]}]})
  return {"version": "v2.0", "data": data}


# ---------------------------------------------------------------------------------------------
# Checks


def original_reader_finds(context, text, start):
  """The original run_squad reader's training-time check that the answer is at answer_start."""
  words, char_to_word = [], []
  after_space = True
  for c in context:
    if c in " \t\r\n" or ord(c) == 0x202F:
      after_space = True
    else:
      if after_space:
        words.append(c)
      else:
        words[-1] += c
      after_space = False
    char_to_word.append(len(words) - 1)
  first, last = char_to_word[start], char_to_word[start + len(text) - 1]
  actual = " ".join(words[first:last + 1])
  return actual.find(" ".join(text.split())) != -1


def check_set(dataset, v2, train, edge=False):
  """Asserts the construction's promises; returns the set of (corpus, document) used."""
  ids = set()
  docs = set()
  for article in dataset["data"]:
    for para in article["paragraphs"]:
      context = para["context"]
      for qa in para["qas"]:
        qid = qa["id"]
        assert ID_RE.match(qid), qid
        assert qid not in ids, qid
        ids.add(qid)
        corpus, doc = qid.split("-")[:2]
        docs.add((corpus, doc))
        assert article["title"] == f"{corpus}-{doc}" or edge, qid
        impossible = qa.get("is_impossible", False)
        assert ("is_impossible" in qa) == v2, qid
        match = QUESTION_RE.match(qa["question"])
        if match:
          quote = match.group(1)
          assert count_occurrences(context, quote) == (0 if impossible else 1), qid
        else:
          assert edge, qid  # only the edge file has other questions
        if impossible:
          assert qa["answers"] == [], qid
          continue
        answers = qa["answers"]
        assert len(answers) == 1 or (not train and len(answers) == 2 and answers[0] == answers[1])
        text, start = answers[0]["text"], answers[0]["answer_start"]
        assert isinstance(start, int) and 0 <= start and start + len(text) <= len(context), qid
        if qid.endswith("_bad_offset"):
          assert context[start:start + len(text)] != text, qid
          assert not original_reader_finds(context, text, start), qid
          continue
        assert context[start:start + len(text)] == text, qid
        assert text == text.strip() and has_alnum(text) and normalize_answer(text), qid
        assert original_reader_finds(context, text, start), qid
        if match and not edge:
          gap = context[context.index(quote) + len(quote):start]
          assert gap[:1] == " " and all(is_edge_punctuation(c) for c in gap[1:]), qid
          assert not is_edge_punctuation(text[0]) and not is_edge_punctuation(text[-1]), qid
  return docs


# ---------------------------------------------------------------------------------------------
# Baselines with the official SQuAD answer normalisation


def normalize_answer(s):
  s = s.lower()
  s = "".join(c for c in s if c not in set(string.punctuation))
  s = re.sub(r"\b(a|an|the)\b", " ", s)
  return " ".join(s.split())


def f1_v1(prediction, gold):
  pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
  same = sum((Counter(pred) & Counter(ref)).values())
  if same == 0:
    return 0.0
  precision, recall = same / len(pred), same / len(ref)
  return 2 * precision * recall / (precision + recall)


def f1_v2(prediction, gold):
  pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
  if not pred or not ref:
    return float(pred == ref)
  return f1_v1(prediction, gold)


def score(dataset, predict, v2):
  """(EM, F1) in percent of predict(context, qa) over all questions."""
  f1 = f1_v2 if v2 else f1_v1
  em_sum = f1_sum = 0.0
  n = 0
  for article in dataset["data"]:
    for para in article["paragraphs"]:
      for qa in para["qas"]:
        golds = [a["text"] for a in qa["answers"]] or ([""] if v2 else [])
        pred = predict(para["context"], qa)
        em_sum += max(float(normalize_answer(pred) == normalize_answer(g)) for g in golds)
        f1_sum += max(f1(pred, g) for g in golds)
        n += 1
  return 100 * em_sum / n, 100 * f1_sum / n


def first_word_of_context(context, qa):
  return context.split()[0]


def empty_answer(context, qa):
  return ""


def first_word_after_quote(context, qa):
  quote = QUESTION_RE.match(qa["question"]).group(1)
  pos = context.find(quote)
  if pos == -1:
    return ""
  rest = context[pos + len(quote):].split()
  return rest[0] if rest else ""


# ---------------------------------------------------------------------------------------------


def write_json(path, obj):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="\n") as f:
    json.dump(obj, f, ensure_ascii=False, indent=None)
    f.write("\n")
  with open(path, encoding="utf-8") as f:
    back = json.load(f)
  if back != obj:
    raise AssertionError(f"{path} does not read back as written")
  return back


def describe(name, dataset):
  paras = [p for a in dataset["data"] for p in a["paragraphs"]]
  qas = [qa for p in paras for qa in p["qas"]]
  impossible = sum(qa.get("is_impossible", False) for qa in qas)
  n_words = [len(p["context"].split()) for p in paras]
  long_ones = sum(n > SHORT_WORDS[1] for n in n_words)
  odd = sum(bool(re.search(r"\n|  ", p["context"])) for p in paras)
  by_corpus = Counter(qa["id"].split("-")[0] for qa in qas)
  print(f"{name}: {len(dataset['data'])} articles, {len(paras)} paragraphs, {len(qas)} questions "
        f"({len(qas) - impossible} answerable, {impossible} unanswerable), by corpus "
        f"{dict(sorted(by_corpus.items()))}; {long_ones} long contexts (>{SHORT_WORDS[1]} words), "
        f"{odd} with newlines or double spaces; context words {min(n_words)}-{max(n_words)}")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--corpora", default=DEFAULT_CORPORA, help="the shared corpora directory")
  parser.add_argument("--out", default=DEFAULT_OUT, help="the output directory")
  args = parser.parse_args(argv)

  rng = random.Random(SEED)
  corpora = {}
  for name, filename in CORPORA:  # fixed order, so the shuffles are reproducible
    corpora[name] = Corpus(name, os.path.join(args.corpora, filename), rng)
    docs = {split: len(d) for split, d in corpora[name].split_docs.items()}
    print(f"{filename}: {len(corpora[name].docs)} documents, split {docs}")
  counts = Counter(line for corpus in corpora.values() for lines in corpus.docs for line in lines)
  for corpus in corpora.values():
    corpus.mark_quotable(counts)

  n_impossible = {split: round(n * IMPOSSIBLE_FRACTION) for split, n in SIZES.items()}
  sets = {
      "train-v1.1.json": make_set(rng, corpora, "train", SIZES["train"], None),
      "dev-v1.1.json": make_set(rng, corpora, "dev", SIZES["dev"], None),
      "train-v2.0.json": make_set(rng, corpora, "train", SIZES["train"], n_impossible["train"]),
      "dev-v2.0.json": make_set(rng, corpora, "dev", SIZES["dev"], n_impossible["dev"]),
      "edge-v2.0.json": make_edge(corpora),
  }

  written = {name: write_json(os.path.join(args.out, name), obj) for name, obj in sets.items()}
  used = {}
  for name, dataset in written.items():
    used[name] = check_set(dataset, v2="v2.0" in name, train=name.startswith("train"),
                           edge=name.startswith("edge"))
  for version in ("v1.1", "v2.0"):
    shared = used[f"train-{version}.json"] & used[f"dev-{version}.json"]
    assert not shared, f"{version}: train and dev share documents {sorted(shared)[:5]}"
  assert not (used["train-v1.1.json"] | used["train-v2.0.json"]) & (
      used["dev-v1.1.json"] | used["dev-v2.0.json"])

  for name, dataset in written.items():
    describe(name, dataset)
  for name in ("dev-v1.1.json", "dev-v2.0.json"):
    v2 = "v2.0" in name
    baselines = [("first word of the context", first_word_of_context),
                 ("the one word after the quote", first_word_after_quote)]
    if v2:
      baselines.append(("always unanswerable (empty)", empty_answer))
    for label, predict in baselines:
      em, f1 = score(written[name], predict, v2)
      print(f"baseline {name} {label}: EM {em:.1f} F1 {f1:.1f}")
  total = 0
  for name in sorted(os.listdir(args.out)):
    total += os.path.getsize(os.path.join(args.out, name))
  print(f"{args.out}: {total} bytes in all")
  return 0


if __name__ == "__main__":
  sys.exit(main())
