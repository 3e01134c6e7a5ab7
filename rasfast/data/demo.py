"""An offline multi-hop world for the demo and tests, generated deterministically from a seed.

Fictional countries, cities, universities, companies and people with functional facts
(a person's birth city and year, employer, university, spouse and occupation; a city's country
and mayor; a company's headquarters, founder and founding year; a university's city and
founding year; a country's capital and currency). Each entity gets one passage written from
its facts, and the facts each passage states are its gold triples. Questions chain 2 or 3
facts ("In which country was X born?" = X's birth city, then that city's country); their gold
passages are the passages along the chain.

``generate_world(seed)`` returns a :class:`~rasfast.data.qa.QADataset` (name "demo") whose
``triples`` hold the gold triples per passage, so every loader-based tool works on it.
Same seed, same world, byte for byte.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .qa import Passage, QADataset, Question

_ONSET = ["b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r",
          "s", "st", "t", "tr", "v", "z", "th", "sh", "j", "w"]
_VOWEL = ["a", "e", "i", "o", "u", "ae", "ai", "ou", "ei", "y"]
_CODA = ["", "", "n", "r", "l", "s", "th", "m", "x", "nd", "rk", "v"]
_CITY_SUFFIX = ["ford", "haven", "mar", "grad", "holm", "wick", "dale", "port", "burg", "stead"]
_COUNTRY_SUFFIX = ["ia", "land", "ora", "istan", "avia", "enia"]
_CURRENCY = ["crown", "mark", "florin", "dinar", "real", "shilling"]
_INDUSTRY = ["shipping", "software", "mining", "textile", "publishing", "brewing", "aerospace",
             "insurance", "railway", "pharmaceutical"]
_COMPANY_SUFFIX = ["Works", "Holdings", "Group", "Industries", "Company", "Systems"]
_UNI_SUFFIX = ["Institute", "College", "Academy", "Polytechnic"]
_OCCUPATION = ["botanist", "architect", "violinist", "engineer", "novelist", "cartographer",
               "surgeon", "astronomer", "painter", "economist", "chemist", "diplomat"]


def _syllable(rng: random.Random) -> str:
    return rng.choice(_ONSET) + rng.choice(_VOWEL) + rng.choice(_CODA)


def _word(rng: random.Random, n: int) -> str:
    return "".join(_syllable(rng) for _ in range(n)).capitalize()


class _Names:
    """Unique fictional names of at least 4 letters."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used = set()

    def make(self, fn) -> str:
        for _ in range(10_000):
            name = fn(self.rng)
            key = name.lower()
            if len(name) >= 4 and key not in self.used:
                self.used.add(key)
                return name
        raise RuntimeError("name space exhausted")


@dataclass
class _Person:
    name: str
    city: int
    year: int
    occupation: str
    employer: Optional[int] = None
    university: Optional[int] = None
    spouse: Optional[int] = None


def _sizes(n_passages: int) -> Tuple[int, int, int, int, int]:
    if n_passages < 100:
        raise ValueError(f"n_passages: expected >= 100, got {n_passages}")
    countries = max(4, n_passages // 80)
    cities = max(12, n_passages // 12)
    universities = max(4, n_passages // 33)
    companies = max(8, n_passages // 8)
    people = n_passages - countries - cities - universities - companies
    return countries, cities, universities, companies, people


def generate_world(seed: int = 0, n_passages: int = 2000, n_questions: int = 300) -> QADataset:
    """A deterministic multi-hop world: ``n_passages`` passages with gold triples, and
    ``n_questions`` questions (about 2/3 two-hop, 1/3 three-hop), each with its answer and
    gold passage ids. ``Question.type`` is ``"<hops>hop:<template>"``."""
    if not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
    rng = random.Random(seed)
    names = _Names(rng)
    n_cty, n_city, n_uni, n_co, n_ppl = _sizes(n_passages)

    countries = [names.make(lambda r: _word(r, 2) + r.choice(_COUNTRY_SUFFIX)) for _ in range(n_cty)]
    currencies = [f"{_word(rng, 2)} {rng.choice(_CURRENCY)}" for _ in range(n_cty)]
    cities = [names.make(lambda r: _word(r, 1) + r.choice(_CITY_SUFFIX)) for _ in range(n_city)]
    city_country = [i % n_cty if i < n_cty else rng.randrange(n_cty) for i in range(n_city)]
    capital = [next(c for c in range(n_city) if city_country[c] == k) for k in range(n_cty)]
    unis = [names.make(lambda r: f"{_word(r, 2)} {r.choice(_UNI_SUFFIX)}") for _ in range(n_uni)]
    uni_city = [rng.randrange(n_city) for _ in range(n_uni)]
    uni_year = [rng.randint(1700, 1950) for _ in range(n_uni)]
    cos = [names.make(lambda r: f"{_word(r, 2)} {r.choice(_COMPANY_SUFFIX)}") for _ in range(n_co)]
    co_city = [rng.randrange(n_city) for _ in range(n_co)]
    co_year = [rng.randint(1820, 1995) for _ in range(n_co)]
    co_industry = [rng.choice(_INDUSTRY) for _ in range(n_co)]

    people: List[_Person] = []
    for _ in range(n_ppl):
        name = names.make(lambda r: f"{_word(r, 1 + r.randrange(2))} {_word(r, 2)}")
        p = _Person(name, rng.randrange(n_city), rng.randint(1900, 1999), rng.choice(_OCCUPATION))
        if rng.random() < 0.8:
            p.employer = rng.randrange(n_co)
        if rng.random() < 0.75:
            p.university = rng.randrange(n_uni)
        people.append(p)
    order = list(range(n_ppl))
    rng.shuffle(order)
    for a, b in zip(order[0:n_ppl // 2:2], order[1:n_ppl // 2:2]):   # ~half the people married
        people[a].spouse, people[b].spouse = b, a
    co_founder = [rng.randrange(n_ppl) for _ in range(n_co)]
    mayor = [rng.randrange(n_ppl) for _ in range(n_city)]

    passages: List[Passage] = []
    triples: List[List[List[str]]] = []
    pid_of: Dict[Tuple[str, int], int] = {}

    def add(kind: str, idx: int, title: str, sentences: List[str], facts: List[Tuple[str, str, str]]):
        pid_of[(kind, idx)] = len(passages)
        passages.append(Passage(len(passages), title, " ".join(sentences)))
        triples.append([list(f) for f in facts])

    for k, c in enumerate(countries):
        cap = cities[capital[k]]
        add("country", k, c, [f"{c} is a country.", f"Its capital is {cap}.",
                              f"The currency of {c} is the {currencies[k]}."],
            [(c, "capital", cap), (c, "currency", currencies[k])])
    for i, c in enumerate(cities):
        ctry, m = countries[city_country[i]], people[mayor[i]].name
        add("city", i, c, [f"{c} is a city in {ctry}.", f"The mayor of {c} is {m}."],
            [(c, "country", ctry), (c, "mayor", m)])
    for u, name in enumerate(unis):
        add("uni", u, name, [f"{name} is a university located in {cities[uni_city[u]]}.",
                             f"It was founded in {uni_year[u]}."],
            [(name, "located in", cities[uni_city[u]]), (name, "founded in year", str(uni_year[u]))])
    for o, name in enumerate(cos):
        f = people[co_founder[o]].name
        add("co", o, name, [f"{name} is a {co_industry[o]} company headquartered in {cities[co_city[o]]}.",
                            f"It was founded by {f} in {co_year[o]}."],
            [(name, "industry", co_industry[o]), (name, "headquartered in", cities[co_city[o]]),
             (name, "founded by", f), (name, "founded in year", str(co_year[o]))])
    for i, p in enumerate(people):
        s = [f"{p.name} is a {p.occupation} who was born in {cities[p.city]} in {p.year}."]
        f = [(p.name, "occupation", p.occupation), (p.name, "born in", cities[p.city]),
             (p.name, "born in year", str(p.year))]
        if p.university is not None:
            s.append(f"{p.name} studied at {unis[p.university]}.")
            f.append((p.name, "studied at", unis[p.university]))
        if p.employer is not None:
            s.append(f"{p.name} works for {cos[p.employer]}.")
            f.append((p.name, "works for", cos[p.employer]))
        if p.spouse is not None:
            s.append(f"{p.name} is married to {people[p.spouse].name}.")
            f.append((p.name, "married to", people[p.spouse].name))
        add("person", i, p.name, s, f)

    P = lambda i: pid_of[("person", i)]  # noqa: E731
    templates = [
        # (name, hops, needs, build(person index) -> (question, answer, gold pids))
        ("country_of_birth", 2, lambda p: True,
         lambda i, p: (f"In which country was {p.name} born?", countries[city_country[p.city]],
                       [P(i), pid_of[("city", p.city)]])),
        ("founder_of_employer", 2, lambda p: p.employer is not None,
         lambda i, p: (f"Who founded the company that {p.name} works for?",
                       people[co_founder[p.employer]].name, [P(i), pid_of[("co", p.employer)]])),
        ("hq_city_of_employer", 2, lambda p: p.employer is not None,
         lambda i, p: (f"In which city is the company that {p.name} works for headquartered?",
                       cities[co_city[p.employer]], [P(i), pid_of[("co", p.employer)]])),
        ("university_founding_year", 2, lambda p: p.university is not None,
         lambda i, p: (f"In what year was the university where {p.name} studied founded?",
                       str(uni_year[p.university]), [P(i), pid_of[("uni", p.university)]])),
        ("mayor_of_birthplace", 2, lambda p: True,
         lambda i, p: (f"Who is the mayor of the city where {p.name} was born?",
                       people[mayor[p.city]].name, [P(i), pid_of[("city", p.city)]])),
        ("spouse_occupation", 2, lambda p: p.spouse is not None,
         lambda i, p: (f"What is the occupation of the person {p.name} is married to?",
                       people[p.spouse].occupation, [P(i), P(p.spouse)])),
        ("spouse_birth_year", 2, lambda p: p.spouse is not None,
         lambda i, p: (f"In what year was the person {p.name} is married to born?",
                       str(people[p.spouse].year), [P(i), P(p.spouse)])),
        ("hq_country_of_employer", 3, lambda p: p.employer is not None,
         lambda i, p: (f"In which country is the company that {p.name} works for headquartered?",
                       countries[city_country[co_city[p.employer]]],
                       [P(i), pid_of[("co", p.employer)], pid_of[("city", co_city[p.employer])]])),
        ("currency_of_birth_country", 3, lambda p: True,
         lambda i, p: (f"Which currency is used in the country where {p.name} was born?",
                       currencies[city_country[p.city]],
                       [P(i), pid_of[("city", p.city)], pid_of[("country", city_country[p.city])]])),
        ("spouse_birth_country", 3, lambda p: p.spouse is not None,
         lambda i, p: (f"In which country was the person {p.name} is married to born?",
                       countries[city_country[people[p.spouse].city]],
                       [P(i), P(p.spouse), pid_of[("city", people[p.spouse].city)]])),
    ]
    questions: List[Question] = []
    two = [t for t in templates if t[1] == 2]
    three = [t for t in templates if t[1] == 3]
    used = set()
    while len(questions) < n_questions:
        tpl = rng.choice(two) if len(questions) % 3 != 2 else rng.choice(three)
        name, hops, ok, build = tpl
        i = rng.randrange(n_ppl)
        if not ok(people[i]) or (name, i) in used:
            continue
        used.add((name, i))
        q, a, gold = build(i, people[i])
        questions.append(Question(f"demo-{len(questions):04d}", q, a, [], gold, f"{hops}hop:{name}"))
    return QADataset("demo", passages, questions, triples)


def hops(question: Question) -> int:
    """2 or 3 for a demo question (from its ``type``)."""
    return int(question.type.split("hop", 1)[0])


__all__ = ["generate_world", "hops"]
