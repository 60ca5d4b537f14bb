"""The generated dev sets of bench/retrieval.py (seeded): English facts about a user planted in one session
and asked about later, among distractors and small talk, and the same kinds of facts in French, Chinese
and Korean. ``python bench/retrieval.py --regenerate`` writes them to bench/data again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

NAMES = [
    "Carla",
    "Tomas",
    "Ines",
    "Bruno",
    "Marta",
    "Felix",
    "Aiko",
    "Omar",
    "Lena",
    "Pedro",
    "Sofia",
    "Yusuf",
]
CITIES = ["Lyon", "Porto", "Krakow", "Valencia", "Ghent", "Bergen", "Turin", "Leipzig", "Bilbao", "Tallinn"]
ANIMALS = ["beagle", "tabby cat", "parrot", "rabbit", "corgi", "tortoise", "hamster", "greyhound"]
PETS = ["Biscuit", "Pepper", "Mango", "Ziggy", "Noodle", "Olive", "Rocket", "Maple"]
FOODS = ["peanuts", "shellfish", "sesame", "kiwi", "gluten", "mustard", "celery", "lupin"]
JOBS = ["nurse", "welder", "pharmacist", "carpenter", "radiographer", "translator", "electrician", "baker"]
COLORS = ["red", "silver", "dark green", "white", "blue", "black"]
CARS = ["Skoda Octavia", "Toyota Yaris", "Volvo estate", "Fiat Panda", "Renault Zoe", "Mazda 3"]
MONTHS = ["March", "April", "May", "June", "September", "October", "November"]
HOBBIES = ["bouldering", "kayaking", "birdwatching", "salsa dancing", "pottery", "orienteering", "chess"]
LANGS = ["Japanese", "Portuguese", "Polish", "Greek", "Korean", "Swahili", "Dutch", "Turkish"]
DRINKS = ["matcha", "rooibos", "espresso", "chai", "yerba mate", "hot chocolate"]
COUNTRIES = ["Iceland", "Vietnam", "Peru", "Morocco", "New Zealand", "Croatia", "Japan", "Chile"]
BODY = ["left knee", "right ankle", "lower back", "shoulder", "wrist", "hamstring"]
FLOORS = ["third", "fifth", "seventh", "second", "top", "ninth"]
YEARS = ["2015", "2017", "2019", "2020", "2021", "2022"]

# (fact, distractor, paraphrased question, question sharing a word with the fact) per fact type. Slots are filled from the lists above.
FACT_TYPES: list[tuple[str, str, str, str]] = [
    (
        "Big news: my sister {name} finally relocated to {city} last month.",
        "My colleague {name2} says her sister just relocated to {city2}.",
        "Which town is the user's sibling living in these days?",
        "Where does the user's sister live now?",
    ),
    (
        "We adopted a {animal} from the shelter and named it {pet}.",
        "My neighbour got a {animal2} called {pet2}, it barks all night.",
        "What did the user call the animal they took home?",
        "What is the name of the animal the user adopted?",
    ),
    (
        "I can't eat anything with {food} in it, I break out in hives.",
        "My cousin {name2} has a {food2} intolerance, poor guy.",
        "Which ingredient gives the user an allergic reaction?",
        "What can the user not eat?",
    ),
    (
        "I started a new job as a {job} at the regional hospital in {month}.",
        "My friend {name2} just quit being a {job2}.",
        "What does the user do for a living now?",
        "What is the user's new job?",
    ),
    (
        "I finally sold the old car and bought a {color} {car}.",
        "{name2} keeps talking about buying a {color2} {car2}.",
        "What vehicle does the user drive at the moment?",
        "Which car did the user buy?",
    ),
    (
        "On Saturdays I go {hobby} with a group from my street.",
        "My brother tried {hobby2} once and hated it.",
        "How does the user spend their weekend free time?",
        "What does the user do on Saturdays?",
    ),
    (
        "I've been taking {lang} classes twice a week since January.",
        "{name2} speaks fluent {lang2}, I'm jealous.",
        "Which foreign tongue is the user studying?",
        "Which language classes is the user taking?",
    ),
    (
        "Honestly nothing beats a mug of {drink} first thing in the morning.",
        "My partner can't stand {drink2}, more for me I guess.",
        "What beverage does the user like to start the day with?",
        "What does the user drink in the morning?",
    ),
    (
        "We're flying to {country} for our honeymoon in {month}.",
        "{name2} went to {country2} last year and loved it.",
        "Where is the user travelling after the wedding?",
        "Where is the user going for the honeymoon?",
    ),
    (
        "I hurt my {body} playing five-a-side, so no running for a while.",
        "{name2} injured their {body2} skiing.",
        "What injury is keeping the user from jogging?",
        "What did the user hurt?",
    ),
    (
        "Our flat is on the {floor} floor and the lift is broken again.",
        "{name2} lives on the {floor2} floor of the same block.",
        "On which storey is the user's apartment?",
        "Which floor is the user's flat on?",
    ),
    (
        "I stopped eating meat back in {year}, best decision ever.",
        "My dad tried going vegetarian in {year2} but gave up.",
        "Since when has the user been vegetarian?",
        "When did the user stop eating meat?",
    ),
    (
        "Please keep your answers short and use bullet points, I read on my phone.",
        "My boss wants long detailed reports, it's exhausting.",
        "How does the user want replies to be formatted?",
        "How should answers be written for the user?",
    ),
]
SMALL_TALK = [
    "The weather has been grey all week.",
    "Can you suggest a quick pasta recipe for tonight?",
    "I watched a documentary about octopuses yesterday.",
    "What's a good way to learn touch typing?",
    "My laptop fan is making a weird noise.",
    "Any tips for sleeping better?",
    "I'm thinking about repainting the kitchen.",
    "The football match last night was a disaster.",
    "How do I convert Celsius to Fahrenheit in my head?",
    "I need a birthday gift idea for a coworker.",
    "Traffic this morning was unbelievable.",
    "Do you know any good podcasts about history?",
]
REPLIES = [
    "That sounds great, tell me more!",
    "Thanks for sharing that with me.",
    "Good to know, I'll keep it in mind.",
    "Interesting! How do you feel about it?",
    "Here is a short answer: try it step by step.",
    "Oh no, I hope it gets better soon.",
]


# Facts that change: (first statement, later statement, question). The later value is the answer and the
# first statement, which shares its words, is the distractor.
UPDATES: list[tuple[str, str, str]] = [
    (
        "I drive a {color} {car} at the moment.",
        "Update on the car front: I traded it in and now I drive a {color2} {car2}.",
        "What car does the user drive now?",
    ),
    (
        "I work as a {job} for now.",
        "Quick update: I left that job, I'm working as a {job2} now.",
        "What is the user's current occupation?",
    ),
    (
        "We rent a small place in {city} for the time being.",
        "We finally moved house, we live in {city2} now.",
        "Which city does the user live in now?",
    ),
    (
        "My go-to morning drink is {drink}.",
        "I switched my morning drink, it's {drink2} these days.",
        "What does the user drink in the morning these days?",
    ),
]
# Events whose date is asked: (event, question). The answer is the event's turn (the date is its session's).
TEMPORAL: list[tuple[str, str]] = [
    ("I ran my first half marathon in {city} this weekend.", "When did the user run a half marathon?"),
    ("My grandmother turned ninety and we threw her a party.", "When was the grandmother's birthday party?"),
    ("I passed my driving test on the second try!", "When did the user get a driving licence?"),
    ("We signed the lease for the new flat in {city} today.", "When did the user sign the lease?"),
    ("I had my wisdom teeth removed this morning, ouch.", "When did the user have the dental surgery?"),
]
# Two hops: (bridge naming someone, a fact about that name, the same fact about another name, question).
MULTI_HOP: list[tuple[str, str, str, str]] = [
    (
        "My best friend is called {name}, we met at university.",
        "{name} just adopted a {animal} called {pet}.",
        "{name2} just adopted a {animal2} called {pet2}.",
        "What is the name of the pet of the user's best friend?",
    ),
    (
        "My manager at work is {name}, she's great.",
        "{name} is moving to {city} next spring.",
        "{name2} is moving to {city2} in the autumn.",
        "Where is the user's manager moving to?",
    ),
    (
        "Our neighbour {name} has three kids.",
        "{name} works night shifts as a {job}.",
        "{name2} works weekends as a {job2}.",
        "What does the user's neighbour do for work?",
    ),
]
EN_POOLS = {
    "name": NAMES, "city": CITIES, "animal": ANIMALS, "pet": PETS, "food": FOODS, "job": JOBS,
    "color": COLORS, "car": CARS, "month": MONTHS, "hobby": HOBBIES, "lang": LANGS, "drink": DRINKS,
    "country": COUNTRIES, "body": BODY, "floor": FLOORS, "year": YEARS,
}  # fmt: skip


def _fill(
    template: str,
    rng: random.Random,
    pools: dict[str, list[str]] = EN_POOLS,
    values: dict[str, str] | None = None,
) -> tuple[str, dict[str, str]]:
    """The template with its slots filled (``values``: reuse these, e.g. a name across two turns)."""
    if values is None:
        values = {k: rng.choice(v) for k, v in pools.items()}
        values.update({f"{k}2": rng.choice([x for x in v if x != values[k]] or v) for k, v in pools.items()})
    return template.format(**values), values


def _date(conversation: int, session: int) -> str:
    day = 10 + conversation % 15 + 9 * session  # sessions nine days apart, from 2025-03-10 on
    return time.strftime("%Y-%m-%d", time.gmtime(1741564800 + (day - 10) * 86400))


def _conversation(
    cid: str,
    c: int,
    rng: random.Random,
    plan: dict[int, list[tuple[str, list[dict[str, Any]]]]],
    sessions: int,
    small_talk: list[str],
    replies: list[str],
    distractors: Callable[[], list[str]],
) -> dict[str, Any]:
    """Turns of ``sessions`` sessions: small talk, the planted lines of each session and two distractors,
    each user turn followed by a reply; questions point at the turns that answer them."""
    turns: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for s in range(sessions):
        lines: list[tuple[str, list[dict[str, Any]]]] = [(rng.choice(small_talk), []) for _ in range(5)]
        for item in [*plan.get(s, []), *((d, []) for d in distractors())]:
            lines.insert(rng.randrange(len(lines) + 1), item)
        for text, asked in lines:
            tid = f"{cid}-t{len(turns)}"
            turns.append({"id": tid, "session": s, "date": _date(c, s), "role": "user", "content": text})
            questions.extend({**q, "answers": [tid]} for q in asked)
            turns.append(
                {
                    "id": f"{cid}-t{len(turns)}",
                    "session": s,
                    "date": _date(c, s),
                    "role": "assistant",
                    "content": rng.choice(replies),
                }
            )
    return {"id": cid, "turns": turns, "questions": questions}


def generate(conversations: int = 30, sessions: int = 6, facts: int = 8, seed: int = 11) -> dict[str, Any]:
    """The English dev set: per conversation ``facts`` planted facts, one fact that changes, one dated
    event and one two-hop fact, asked about in the last session."""
    rng = random.Random(seed)
    convs = []
    for c in range(conversations):
        chosen = rng.sample(range(len(FACT_TYPES)), facts)
        plan: dict[int, list[tuple[str, list[dict[str, Any]]]]] = {}

        def plant(session: int, text: str, asked: list[dict[str, Any]], plan: dict[int, Any] = plan) -> None:
            plan.setdefault(session, []).append((text, asked))

        for f in chosen:  # each fact goes in a session before the last
            style = rng.choice(["paraphrase", "lexical"])
            question = FACT_TYPES[f][2 if style == "paraphrase" else 3]
            plant(
                rng.randrange(sessions - 1),
                _fill(FACT_TYPES[f][0], rng)[0],
                [{"question": question, "type": style}],
            )
        first, later, question = rng.choice(UPDATES)
        early = rng.randrange(sessions - 2)
        text, values = _fill(first, rng)
        plant(early, text, [])
        plant(
            rng.randrange(early + 1, sessions - 1),
            _fill(later, rng, values=values)[0],
            [{"question": question, "type": "update"}],
        )
        event, question = rng.choice(TEMPORAL)
        plant(rng.randrange(sessions - 1), _fill(event, rng)[0], [{"question": question, "type": "temporal"}])
        bridge, fact, other, question = rng.choice(MULTI_HOP)
        text, values = _fill(bridge, rng)
        plant(rng.randrange(sessions - 1), text, [])
        plant(
            rng.randrange(sessions - 1),
            _fill(fact, rng, values=values)[0],
            [{"question": question, "type": "multi-hop"}],
        )
        plant(rng.randrange(sessions - 1), _fill(other, rng, values=values)[0], [])

        def distractors(chosen: list[int] = chosen) -> list[str]:
            return [_fill(FACT_TYPES[f][1], rng)[0] for f in rng.sample(chosen, 2)]

        convs.append(_conversation(f"c{c}", c, rng, plan, sessions, SMALL_TALK, REPLIES, distractors))
    return {"name": "generated", "seed": seed, "conversations": convs}


# ---------------------------------------------------------------- the multilingual set

# Per language: pools, then (fact, distractor, paraphrased question, question sharing a word) per fact type.
LANGUAGES: dict[str, dict[str, Any]] = {
    "fr": {
        "pools": {
            "name": ["Camille", "Julien", "Léa", "Mathis", "Chloé", "Hugo"],
            "city": ["Nantes", "Bordeaux", "Lille", "Strasbourg", "Rennes", "Grenoble"],
            "animal": ["beagle", "chat tigré", "perroquet", "lapin"],
            "pet": ["Biscotte", "Pépin", "Caramel", "Filou"],
            "food": ["arachides", "fruits de mer", "sésame", "kiwis"],
            "job": ["infirmière", "pharmacien", "menuisier", "boulanger"],
            "drink": ["thé vert", "café noir", "chocolat chaud", "maté"],
            "country": ["Islande", "Pérou", "Croatie", "Japon"],
            "month": ["mars", "avril", "mai", "juin"],
        },
        "facts": [
            ("Grande nouvelle : ma sœur {name} a enfin déménagé à {city} le mois dernier.",
             "Ma collègue {name2} dit que sa sœur vient de s'installer à {city2}.",
             "Dans quelle ville habite la frangine de l'utilisateur aujourd'hui ?",
             "Où la sœur de l'utilisateur a-t-elle déménagé ?"),
            ("Nous avons adopté un {animal} au refuge et nous l'avons appelé {pet}.",
             "Le {animal2} du voisin, {pet2}, aboie toute la nuit.",
             "Comment se nomme la bête que l'utilisateur a recueillie ?",
             "Quel nom a l'animal adopté par l'utilisateur ?"),
            ("Je ne peux rien manger qui contienne des {food}, je fais de l'urticaire.",
             "Mon cousin {name2} est intolérant aux {food2}, le pauvre.",
             "Quel ingrédient provoque une réaction allergique chez l'utilisateur ?",
             "Qu'est-ce que l'utilisateur ne peut pas manger ?"),
            ("J'ai commencé un nouveau travail comme {job} à l'hôpital en {month}.",
             "Mon ami {name2} vient de quitter son poste de {job2}.",
             "Quel métier exerce l'utilisateur désormais ?",
             "Quel nouveau travail l'utilisateur a-t-il commencé ?"),
            ("Rien ne vaut une tasse de {drink} le matin au réveil.",
             "Mon compagnon ne supporte pas le {drink2}, tant mieux pour moi.",
             "Quelle boisson l'utilisateur prend-il pour bien démarrer la journée ?",
             "Que boit l'utilisateur le matin ?"),
            ("Nous partons en {country} pour notre voyage de noces en {month}.",
             "{name2} est allé en {country2} l'an dernier et a adoré.",
             "Où l'utilisateur ira-t-il après son mariage ?",
             "Où se passe le voyage de noces de l'utilisateur ?"),
        ],
        "small_talk": [
            "Il a fait gris toute la semaine.",
            "Tu as une recette de pâtes rapide pour ce soir ?",
            "J'ai regardé un documentaire sur les pieuvres hier.",
            "Mon ordinateur portable fait un bruit bizarre.",
            "Des conseils pour mieux dormir ?",
            "Je pense repeindre la cuisine.",
        ],
        "replies": [
            "Ça a l'air super, raconte-moi !",
            "Merci de me l'avoir dit.",
            "Bon à savoir, je m'en souviendrai.",
            "Oh non, j'espère que ça ira mieux.",
        ],
    },
    "zh": {
        "pools": {
            "name": ["小林", "王芳", "李娜", "张伟", "陈静", "刘洋"],
            "city": ["成都", "杭州", "西安", "厦门", "青岛", "昆明"],
            "animal": ["比格犬", "虎斑猫", "鹦鹉", "兔子"],
            "pet": ["豆豆", "球球", "花花", "毛毛"],
            "food": ["花生", "海鲜", "芝麻", "猕猴桃"],
            "job": ["护士", "药剂师", "木匠", "面包师"],
            "drink": ["绿茶", "咖啡", "热巧克力", "豆浆"],
            "country": ["冰岛", "秘鲁", "克罗地亚", "日本"],
            "month": ["三月", "四月", "五月", "六月"],
        },
        "facts": [
            ("好消息：我妹妹{name}上个月终于搬到了{city}。",
             "我同事{name2}说她妹妹刚搬到{city2}。",
             "用户的姐妹现在住在哪个城市？",
             "用户的妹妹搬到了哪里？"),
            ("我们从收容所领养了一只{animal}，给它取名叫{pet}。",
             "邻居家的{animal2}叫{pet2}，整晚都在叫。",
             "用户带回家的小动物叫什么名字？",
             "用户领养的动物叫什么？"),
            ("我不能吃任何含有{food}的东西，会起荨麻疹。",
             "我表哥{name2}对{food2}不耐受，真可怜。",
             "什么食材会让用户过敏？",
             "用户不能吃什么？"),
            ("我{month}开始在医院做{job}的新工作。",
             "我朋友{name2}刚辞去了{job2}的工作。",
             "用户现在从事什么职业？",
             "用户的新工作是什么？"),
            ("早上起来最好的就是一杯{drink}。",
             "我的伴侣受不了{drink2}，正好我多喝点。",
             "用户每天用什么饮品开始一天？",
             "用户早上喝什么？"),
            ("我们{month}要去{country}度蜜月。",
             "{name2}去年去了{country2}，很喜欢。",
             "用户婚礼后要去哪里旅行？",
             "用户去哪里度蜜月？"),
        ],
        "small_talk": [
            "这个星期天气一直阴沉沉的。",
            "今晚有什么简单的面条做法吗？",
            "我昨天看了一部关于章鱼的纪录片。",
            "我的笔记本电脑风扇声音很怪。",
            "有什么改善睡眠的建议吗？",
            "我在考虑重新粉刷厨房。",
        ],
        "replies": ["听起来很棒，多说一点！", "谢谢你告诉我。", "好的，我会记住的。", "哎呀，希望快点好起来。"],
    },
    "ko": {
        "pools": {
            "name": ["민수", "지영", "서연", "준호", "하은", "도윤"],
            "city": ["부산", "대구", "광주", "전주", "강릉", "제주"],
            "animal": ["비글", "고양이", "앵무새", "토끼"],
            "pet": ["콩이", "보리", "초코", "두부"],
            "food": ["땅콩", "새우", "참깨", "키위"],
            "job": ["간호사", "약사", "목수", "제빵사"],
            "drink": ["녹차", "커피", "핫초코", "보리차"],
            "country": ["아이슬란드", "페루", "크로아티아", "일본"],
            "month": ["3월", "4월", "5월", "6월"],
        },
        "facts": [
            ("좋은 소식이에요. 제 여동생 {name} 씨가 지난달 드디어 {city}에 새 집을 구했어요.",
             "제 동료 {name2} 씨 말로는 자기 여동생이 {city2}에 이사했대요.",
             "사용자의 자매는 요즘 어느 도시에 살고 있나요?",
             "사용자의 여동생은 어디로 이사했나요?"),
            ("보호소에서 {animal}를 입양해서 이름을 {pet}라고 지었어요.",
             "이웃집 {animal2} {pet2}가 밤새 짖어요.",
             "사용자가 데려온 동물은 뭐라고 부르나요?",
             "사용자가 입양한 동물의 이름은 무엇인가요?"),
            ("저는 {food}가 들어간 음식을 먹으면 두드러기가 나요.",
             "제 사촌 {name2}는 {food2} 알레르기가 있어요.",
             "어떤 재료가 사용자에게 알레르기 반응을 일으키나요?",
             "사용자가 먹으면 두드러기가 나는 음식은?"),
            ("{month}부터 병원에서 {job}로 새 일을 시작했어요.",
             "제 친구 {name2}는 {job2} 일을 그만뒀어요.",
             "사용자는 요즘 무슨 직업을 가지고 있나요?",
             "사용자가 시작한 새 일은 무엇인가요?"),
            ("아침에 일어나서 마시는 {drink} 한 잔이 최고예요.",
             "제 애인은 {drink2}를 정말 싫어해요.",
             "사용자는 하루를 어떤 음료로 시작하나요?",
             "사용자는 아침에 무엇을 마시나요?"),
            ("{month}에 {country}로 신혼여행을 가요.",
             "{name2}는 작년에 {country2}에 다녀왔는데 좋았대요.",
             "사용자는 결혼식 후에 어디로 여행을 가나요?",
             "사용자는 신혼여행을 어디로 가나요?"),
        ],
        "small_talk": [
            "이번 주 내내 날씨가 흐렸어요.",
            "오늘 저녁에 만들 간단한 파스타 레시피 있나요?",
            "어제 문어에 관한 다큐멘터리를 봤어요.",
            "노트북 팬에서 이상한 소리가 나요.",
            "잠을 더 잘 자는 방법이 있을까요?",
            "부엌을 다시 칠할까 생각 중이에요.",
        ],
        "replies": ["정말 좋네요, 더 얘기해 주세요!", "알려 주셔서 감사해요.", "좋아요, 기억해 둘게요.", "저런, 빨리 나아지길 바라요."],
    },
}  # fmt: skip


# Cross-lingual questions: the English question sharing a word with each fact (``FACT_TYPES`` index of
# each of ``LANGUAGES``' facts, in order), and the English names of the places a fact names.
ENGLISH_FACT = [0, 1, 2, 3, 7, 8]
ENGLISH_NAMES: dict[str, dict[str, str]] = {
    "fr": {"Islande": "Iceland", "Pérou": "Peru", "Croatie": "Croatia", "Japon": "Japan"},
    "zh": {"成都": "Chengdu", "杭州": "Hangzhou", "西安": "Xi'an", "厦门": "Xiamen", "青岛": "Qingdao",
           "昆明": "Kunming", "冰岛": "Iceland", "秘鲁": "Peru", "克罗地亚": "Croatia", "日本": "Japan"},
    "ko": {"부산": "Busan", "대구": "Daegu", "광주": "Gwangju", "전주": "Jeonju", "강릉": "Gangneung",
           "제주": "Jeju", "아이슬란드": "Iceland", "페루": "Peru", "크로아티아": "Croatia", "일본": "Japan"},
}  # fmt: skip


def _cross_lingual(
    lang: str, conv: dict[str, Any], planted: list[tuple[int, str, dict[str, str]]]
) -> list[dict[str, Any]]:
    """English questions about a conversation in ``lang``: for each planted fact (type, text, slot values),
    the English question sharing a word with it (type "<lang> cross-lingual"), and the English name of
    the place it names ("Osaka" for 大阪; "<lang> cross-lingual name"), whose answers are every user turn
    that names the place."""
    turn_of = {t["content"]: t["id"] for t in conv["turns"] if t["role"] == "user"}
    out: list[dict[str, Any]] = []
    for f, text, values in planted:
        out.append(
            {
                "question": FACT_TYPES[ENGLISH_FACT[f]][3],
                "type": f"{lang} cross-lingual",
                "answers": [turn_of[text]],
            }
        )
        for slot in ("city", "country"):
            name = values[slot]
            if f"{{{slot}}}" in LANGUAGES[lang]["facts"][f][0] and name in ENGLISH_NAMES[lang]:
                answers = [tid for content, tid in turn_of.items() if name in content]
                out.append(
                    {
                        "question": ENGLISH_NAMES[lang][name],
                        "type": f"{lang} cross-lingual name",
                        "answers": answers,
                    }
                )
    return out


def generate_multilingual(
    per_language: int = 10, sessions: int = 6, facts: int = 5, seed: int = 12
) -> dict[str, Any]:
    """French, Chinese and Korean conversations built as the English ones (paraphrased and lexical
    questions), each with its English questions apart (``cross_lingual``): the set the fusion rule was
    chosen on is ``questions``, and the cross-lingual ones are measured per language beside it."""
    rng = random.Random(seed)
    convs = []
    for lang, spec in LANGUAGES.items():
        for n in range(per_language):
            chosen = rng.sample(range(len(spec["facts"])), facts)
            plan: dict[int, list[tuple[str, list[dict[str, Any]]]]] = {}
            planted: list[tuple[int, str, dict[str, str]]] = []
            for f in chosen:
                style = rng.choice(["paraphrase", "lexical"])
                fact = spec["facts"][f]
                text, values = _fill(fact[0], rng, spec["pools"])
                planted.append((f, text, values))
                asked = [{"question": fact[2 if style == "paraphrase" else 3], "type": f"{lang} {style}"}]
                plan.setdefault(rng.randrange(sessions - 1), []).append((text, asked))

            def distractors(chosen: list[int] = chosen, spec: dict[str, Any] = spec) -> list[str]:
                return [_fill(spec["facts"][f][1], rng, spec["pools"])[0] for f in rng.sample(chosen, 2)]

            conv = _conversation(
                f"{lang}{n}", n, rng, plan, sessions, spec["small_talk"], spec["replies"], distractors
            )
            convs.append({**conv, "cross_lingual": _cross_lingual(lang, conv, planted)})
    return {"name": "multilingual", "seed": seed, "conversations": convs}
