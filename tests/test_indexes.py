"""The BM25 and vector indexes against reference implementations."""
from __future__ import annotations

import numpy as np
import pytest

from lightmem.stores.views.lexical import LexicalIndex
from lightmem.stores.views.vector import VectorIndex
from lightmem.text import analyze

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def _corpus(rng, n):
    return [" ".join(rng.choice(WORDS, size=rng.integers(1, 12))) for _ in range(n)]


def test_bm25_matches_bm25s_lucene():
    bm25s = pytest.importorskip("bm25s")
    rng = np.random.default_rng(1)
    docs = _corpus(rng, 60)
    idx = LexicalIndex(k1=1.5, b=0.75)
    for i, d in enumerate(docs):
        idx.add(i, d)
    ref = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    ref.index([analyze(d) for d in docs], show_progress=False)
    for _ in range(20):
        query = " ".join(rng.choice(WORDS, size=3, replace=False))
        ids, got = idx.scores(query)
        want = ref.get_scores(analyze(query))
        np.testing.assert_allclose(got[np.argsort(ids)], want, rtol=1e-5, atol=1e-6)


def test_bm25_removal_equals_rebuild_without_the_docs():
    rng = np.random.default_rng(2)
    docs = _corpus(rng, 120)
    idx = LexicalIndex()
    for i, d in enumerate(docs):
        idx.add(i, d)
    gone = set(rng.choice(120, size=50, replace=False).tolist())  # forces a compaction
    idx.remove(gone)
    ref = LexicalIndex()
    for i, d in enumerate(docs):
        if i not in gone:
            ref.add(i, d)
    assert len(idx) == len(ref) == 70
    for q in ("alpha beta", "sigma rho pi", "unknownword"):
        a_ids, a = idx.scores(q)
        b_ids, b = ref.scores(q)
        assert set(a_ids.tolist()) == set(b_ids.tolist())
        np.testing.assert_allclose(a[np.argsort(a_ids)], b[np.argsort(b_ids)], rtol=1e-6)
    top_ids, top_sc, _ = idx.top("alpha", 5)
    assert not set(top_ids.tolist()) & gone and np.all(np.diff(top_sc) <= 0)


def test_bm25_bulk_load_builds_the_same_index_as_one_by_one():
    rng = np.random.default_rng(3)
    docs = _corpus(rng, 300)
    one, bulk = LexicalIndex(), LexicalIndex()
    for i, d in enumerate(docs[:100]):  # both already hold documents, one of which the bulk load replaces
        one.add(i, d)
        bulk.add(i, d)
    later = [(i + 100, d) for i, d in enumerate(docs[100:])] + [(7, "alpha omega alpha")]
    for i, d in later:
        one.add(i, d)
    bulk.add_many(later)
    assert len(one) == len(bulk) == 300 and one.nbytes() == bulk.nbytes()
    for q in ("alpha beta", "sigma rho pi alpha", "omega", "unknownword"):
        a_ids, a = one.scores(q)
        b_ids, b = bulk.scores(q)
        np.testing.assert_array_equal(a_ids, b_ids)
        np.testing.assert_allclose(a, b, rtol=1e-6)
        assert one.top(q, 10).ids.tolist() == bulk.top(q, 10).ids.tolist()
    bulk.remove(range(150))  # a compaction of bulk-built postings
    one.remove(range(150))
    np.testing.assert_allclose(one.scores("beta gamma")[1], bulk.scores("beta gamma")[1], rtol=1e-6)


def test_analyze_stems_and_drops_stopwords():
    assert analyze("The runners were running to the Marathons!") == ["runner", "were", "run", "marathon"]


def _unit(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_english_text_is_analysed_as_before_whatever_else_is_in_it():
    english = "Caroline's 3 kids went camping in the mountains last weekend, didn't they?"
    assert analyze(english) == ["caroline'", "3", "kid", "went", "camp", "mountain", "last", "weekend", "didn't"]
    # one word of another script changes nothing for the English words around it
    assert analyze(english + " 東京") == analyze(english) + ["東京"]


@pytest.mark.parametrize("text, query, shared", [
    ("我昨天去了北京大学看朋友", "北京大学在哪里", {"北京", "京大", "大学"}),   # Chinese: no spaces
    ("東京で寿司を食べました", "寿司はどこで食べた", {"寿司"}),            # Japanese
    ("서울에서 친구를 만났어요", "서울 친구", {"서울", "친구"}),            # Korean: words take particles
    ("ฉันไปตลาดเมื่อวาน", "ไปตลาด", {"ไป", "ปต", "ตล", "ลา", "าด"}),     # Thai: no spaces, vowel marks
    ("אני גר בתל אביב", "אביב", {"אביב"}),                                # Hebrew
    ("Я живу в Москве", "МОСКВЕ", {"москве"}),                            # Cyrillic, case-folded
    ("नमस्ते दुनिया", "दुनिया", {"दुनिया"}),                                # Devanagari with its vowel signs
])
def test_other_scripts_yield_terms_a_query_shares(text, query, shared):
    assert shared <= set(analyze(text)) & set(analyze(query))


def test_bm25_finds_chinese_thai_and_hebrew_memories():
    index = LexicalIndex()
    docs = ["我昨天去了北京大学看朋友", "ฉันไปตลาดเมื่อวาน", "אני גר בתל אביב", "I went to the market yesterday"]
    for i, d in enumerate(docs):
        index.add(i, d)
    for query, want in (("北京大学", 0), ("ตลาด", 1), ("תל אביב", 2), ("market", 3)):
        hits = index.top(query, 2)
        assert len(hits.ids) and int(hits.ids[0]) == want, (query, hits.ids)


def test_vector_search_matches_bruteforce_and_survives_removal():
    rng = np.random.default_rng(3)
    vecs = _unit(rng, 200, 32)
    ids = np.arange(1000, 1200)
    idx = VectorIndex(32)
    idx.add(ids, vecs)
    q = _unit(rng, 1, 32)[0]
    got_ids, got = idx.search(q, 10)
    ref = np.argsort(-(vecs @ q))[:10]
    assert got_ids.tolist() == (ids[ref]).tolist()
    np.testing.assert_allclose(got, (vecs @ q)[ref], rtol=1e-5)
    drop = ids[ref[:3]]
    idx.remove(drop)
    got_ids, _ = idx.search(q, 10)
    assert not set(got_ids.tolist()) & set(drop.tolist())
    keep = ~np.isin(ids, drop)
    assert got_ids.tolist() == ids[keep][np.argsort(-(vecs[keep] @ q))[:10]].tolist()
    np.testing.assert_allclose(idx.cosine(q, [int(ids[keep][0]), 999_999]), [vecs[keep][0] @ q, 0.0], rtol=1e-5)


def test_vector_masked_search_is_exact_over_allowed_rows():
    rng = np.random.default_rng(4)
    vecs = _unit(rng, 100, 16)
    idx = VectorIndex(16)
    idx.add(np.arange(100), vecs)
    mask = np.zeros(100, dtype=bool)
    mask[::7] = True
    q = _unit(rng, 1, 16)[0]
    got_ids, _ = idx.search(q, 5, mask)
    allowed = np.flatnonzero(mask)
    assert got_ids.tolist() == allowed[np.argsort(-(vecs[allowed] @ q))[:5]].tolist()
    assert idx.search(q, 5, np.zeros(100, dtype=bool))[0].size == 0


def test_hnsw_index_finds_the_exact_neighbour_and_rebuilds_on_removal():
    rng = np.random.default_rng(5)
    vecs = _unit(rng, 300, 16)
    idx = VectorIndex(16, kind="hnsw")
    idx.add(np.arange(300), vecs)
    assert idx.search(vecs[42], 1)[0].tolist() == [42]
    idx.remove([42])
    assert 42 not in idx.search(vecs[42], 5)[0].tolist()


def test_vector_index_rejects_duplicates_and_bad_shapes():
    idx = VectorIndex(4)
    idx.add(np.array([1]), np.ones((1, 4), dtype=np.float32) / 2)
    with pytest.raises(ValueError):
        idx.add(np.array([1]), np.ones((1, 4), dtype=np.float32))
    with pytest.raises(ValueError):
        idx.add(np.array([2]), np.ones((1, 3), dtype=np.float32))
