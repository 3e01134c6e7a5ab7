"""The generated demo world: deterministic, consistent facts, answerable questions."""
import pytest

from rasfast.data.demo import generate_world, hops


@pytest.fixture(scope="module")
def world():
    return generate_world(seed=3, n_passages=2000, n_questions=300)


def test_deterministic():
    a, b = generate_world(5, 500, 40), generate_world(5, 500, 40)
    assert a.passages == b.passages and a.triples == b.triples
    assert [vars(q) for q in a.questions] == [vars(q) for q in b.questions]
    c = generate_world(6, 500, 40)
    assert a.passages != c.passages


def test_sizes(world):
    assert len(world.passages) == 2000 and len(world.triples) == 2000
    assert [p.pid for p in world.passages] == list(range(2000))
    assert len({p.title for p in world.passages}) == 2000            # one passage per entity
    assert len(world.questions) == 300
    two = sum(hops(q) == 2 for q in world.questions)
    assert two == 200 and sum(hops(q) == 3 for q in world.questions) == 100


def test_triples_are_stated_in_their_passage(world):
    for p, ts in zip(world.passages, world.triples):
        assert ts
        for s, _, o in ts:
            assert s in p.text and o in p.text and s == p.title


def test_questions_follow_gold_chains(world):
    """Walking the gold triples of the gold passages from the question's entity reaches the
    answer in exactly hops(q) steps."""
    facts = {}
    for ts in world.triples:
        for s, pr, o in ts:
            facts.setdefault(s, []).append(o)
    for q in world.questions:
        gold = q.gold_pids
        assert len(gold) == hops(q) and len(set(gold)) == len(gold)
        assert all(0 <= g < len(world.passages) for g in gold)
        start = world.passages[gold[0]].title
        assert start in q.question
        frontier = {start}
        for _ in range(hops(q)):
            frontier = {o for e in frontier for o in facts.get(e, [])}
        assert q.answer in frontier, q
        # each gold passage after the first is about an entity named in the previous one
        for a, b in zip(gold, gold[1:]):
            assert world.passages[b].title in world.passages[a].text


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_passages"):
        generate_world(0, n_passages=50)
    with pytest.raises(TypeError, match="seed"):
        generate_world("0")
