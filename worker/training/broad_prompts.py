"""A second, broader prompt family: the everyday chat and writing requests users send.

The template set in ``prompts.py`` covers explanation, lists, code, structured fields,
summarisation and long-form essays about a fixed topic list. Served traffic is broader:
advice and how-to questions, "why" questions, comparisons, letters, speeches, product copy,
stories about people, small SQL / shell tasks, CSV and form filling. A drafter trained only on
the first family accepts visibly less on such prompts (semi-ar's first-position acceptance
0.45 on the benchmark's prompt file against 0.57 on the held-out templates), so
``--extra-prompts N`` adds the first N of these to the training split.

Every subject list here is the project's own; none of these prompts is a benchmark prompt
(``tests/test_training.py`` checks the two sets are disjoint).
"""

from __future__ import annotations

import random

from specd.worker.training.prompts import Prompt

# ids of broad prompts start here, far above the template set's (they seed sampling choices)
ID_BASE = 100_000

ACTIVITIES_EN = [
    "saving money on groceries", "writing a good resume", "learning to swim as an adult",
    "keeping houseplants alive", "sleeping well on a long flight", "preparing for a job interview",
    "staying motivated at the gym", "taking better photos with a phone", "reading more books",
    "cooking for a large family", "organising a small kitchen", "training a new puppy",
    "running a productive meeting", "learning to play the piano", "studying for a math exam",
    "writing clear emails", "staying healthy in winter", "making a long drive less tiring",
    "planning a birthday party", "keeping a journal", "reducing screen time",
    "negotiating a salary", "moving to a new apartment", "giving constructive feedback",
]
HOWTO_EN = [
    "remove a coffee stain from a white shirt", "start running as a complete beginner",
    "make friends after moving to a new city", "clean a laptop keyboard safely",
    "write a thank-you note to a teacher", "ask my manager for a day off",
    "change a flat bicycle tyre", "make a simple budget spreadsheet",
    "apologise to a friend after an argument", "brew a good cup of tea",
    "set up a home Wi-Fi network", "prepare for a presentation in front of a crowd",
    "choose a good watermelon", "stop procrastinating on homework", "pack a suitcase efficiently",
    "back up the photos on my phone", "calm down before an exam", "say no to extra work politely",
    "start a vegetable garden on a balcony", "teach a child to ride a bike",
]
WHY_EN = [
    "do leaves change colour in autumn", "do dogs wag their tails", "do onions make people cry",
    "do we yawn", "do stars twinkle at night", "does bread dough rise", "does ice float on water",
    "do we get hiccups", "is the ocean salty", "do birds fly south for the winter",
    "does the moon change shape", "do we dream", "do cats like boxes",
    "does metal feel colder than wood", "do airplanes leave white trails in the sky",
    "do we need vitamins", "does popcorn pop", "do people get jet lag",
]
PAIRS_EN = [
    ("a virus", "a bacterium"), ("a crocodile", "an alligator"), ("baking soda", "baking powder"),
    ("a lake", "a pond"), ("speed", "velocity"), ("a hurricane", "a tornado"),
    ("RAM", "storage"), ("a debit card", "a credit card"), ("a frog", "a toad"),
    ("an ocean", "a sea"), ("a latte", "a cappuccino"), ("a comet", "an asteroid"),
    ("a city", "a town"), ("HTTP", "HTTPS"), ("a simile", "a metaphor"),
]
SITUATIONS_EN = [
    "my first week at university", "a long-distance move", "my first marathon",
    "hosting guests from another country", "a job interview over video", "my first time camping",
    "working from home with small children", "a week-long trip to Japan",
    "starting a small online shop", "learning to drive", "a rainy day with bored kids",
]
RECIPIENTS_EN = [
    "your grandmother", "a former teacher", "your new neighbour", "a pen pal in Brazil",
    "the city council", "your future self", "a childhood friend", "a hotel manager",
]
LETTER_SUBJECTS_EN = [
    "your summer holiday by the sea", "a book that changed your mind", "moving to a new city",
    "a problem with the street lights", "a recent family celebration", "learning a new hobby",
]
OCCASIONS_EN = [
    "a friend's wedding", "the opening of a community library", "a retirement party",
    "the first day of a new school year", "a charity fundraising dinner",
    "a team that just won a championship", "a company's tenth anniversary",
]
PRODUCTS_EN = [
    "a pair of noise-cancelling headphones", "a folding electric bicycle", "a smart desk lamp",
    "a handmade ceramic mug", "a solar-powered phone charger", "a lightweight hiking backpack",
    "an organic green tea", "a children's picture book about space",
]
CHARACTERS_EN = [
    "a baker who finds a map in a bag of flour", "a shy dragon who wants to sing",
    "a girl who can talk to trees", "an old fisherman and a lost seagull",
    "two strangers stuck in a lift", "a detective cat", "a boy who builds a boat from bottles",
    "a time traveller who misses the bus", "a lonely astronaut on Mars",
]
PEOPLE_EN = [
    "a zookeeper", "a firefighter", "a bus driver in London", "a beekeeper", "a ballet dancer",
    "a mountain guide", "a night-shift nurse", "a street musician",
]
PLACES_EN = [
    "a busy train station", "a small fishing village", "a school playground",
    "a desert", "a farmers' market", "a forest",
]
POEM_TOPICS_EN = ["the sea", "autumn rain", "a city at night", "friendship", "an old house",
                  "the first snow", "a cup of coffee"]
SQL_TASKS = [
    "counts the customers in each country from a table named customers",
    "finds the five most expensive products in a table named products",
    "returns every employee hired after 2020 from a table named employees",
    "computes the total sales per month from a table named sales",
    "deletes the rows with an empty email from a table named users",
    "joins the tables orders and customers on customer_id",
    "finds duplicate email addresses in a table named accounts",
]
BASH_TASKS = [
    "finds every file larger than 100 MB in the home folder",
    "renames all .txt files in a folder to .md",
    "prints the ten largest folders in the current directory",
    "counts how many times the word error appears in a log file",
    "deletes the files older than seven days in /tmp",
    "shows the processes that use the most memory",
]
CLASSES = ["a bank account with deposit and withdraw", "a queue with enqueue and dequeue",
           "a to-do list", "a rectangle with area and perimeter", "a simple counter",
           "a temperature sensor reading", "a library book with a due date"]
SNIPPETS = [
    "print(sum(x for x in range(100) if x % 3 == 0))", "words = text.split(); print(len(set(words)))",
    "squares = {n: n * n for n in range(5)}", "with open('a.txt') as f: lines = f.readlines()",
    "result = sorted(names, key=len, reverse=True)", "evens = list(filter(lambda n: n % 2 == 0, nums))",
    "while n > 1: n = n // 2 if n % 2 == 0 else 3 * n + 1",
]
CSV_COLUMNS = ["name, department, salary", "city, country, population", "date, item, amount",
               "student, subject, grade", "title, author, year", "team, wins, losses"]
THINGS = [
    ("the continents", "in alphabetical order"), ("the primary colours", "one per line"),
    ("the months of the year", "as a numbered list"), ("five musical instruments", "with a short description each"),
    ("six vegetables", "grouped by colour"), ("the noble gases", "with their symbols"),
    ("four seasons", "with one typical activity each"), ("five famous painters", "with one painting each"),
]
TABLE_ITEMS = [("four animals", "habitats"), ("three cities", "countries"),
               ("five metals", "melting points"), ("three planets", "number of moons"),
               ("four sports", "number of players")]
JSON_ITEMS = [("three books", "authors"), ("four cars", "makers"), ("five rivers", "continents"),
              ("three languages", "number of speakers")]
YAML_KEYS = ["name, version and dependencies", "database, user and timeout",
             "title, theme and language", "image, replicas and port"]

ACTIVITIES_ZH = ["省钱", "学习英语", "减肥", "早起", "照顾老人", "养猫", "准备考试", "做饭",
                 "整理房间", "锻炼身体", "提高写作水平", "和同事相处"]
HOWTO_ZH = ["去除衣服上的油渍", "开始跑步", "在新城市交朋友", "做一道番茄炒蛋", "保护眼睛",
            "安排周末时间", "给老师写感谢信", "缓解工作压力", "挑选新鲜的水果", "学会游泳"]
WHY_ZH = ["树叶在秋天会变黄", "天空是蓝色的", "人会打哈欠", "海水是咸的", "月亮会有圆缺",
          "冬天容易感冒", "猫喜欢晒太阳", "飞机能在天上飞", "面包会发酵"]
PAIRS_ZH = [("病毒", "细菌"), ("绿茶", "红茶"), ("天气", "气候"), ("城市", "乡村"),
            ("硬盘", "内存"), ("小说", "散文"), ("台风", "龙卷风")]
WRITING_ZH = ["写一封给妈妈的信，讲讲你最近的生活。", "写一段毕业典礼上的发言稿。",
              "为一款智能手表写一段产品介绍。", "描写一下下雨天的城市。", "写一首关于月亮的小诗。",
              "讲一个关于小狗和小猫的故事。", "描述一位快递员的一天。", "写一篇关于家乡的短文。",
              "写一封邀请朋友参加生日聚会的邮件。", "为一家咖啡店写一段开业宣传语。",
              "讲一个关于勇气的小故事。", "写一篇关于秋天的散文。", "描述一次难忘的旅行。",
              "写一段介绍自己的话，用于新公司的第一次见面。"]
STRUCT_ZH = ["用JSON格式给出三个城市的名称和人口。", "列出一年中的十二个月份。",
             "用表格列出三种水果和它们的颜色。", "用JSON格式给出一部电影的名称、导演和上映年份。",
             "列出中国的五个省份和它们的省会。", "用编号列表列出做蛋糕的步骤。",
             "用JSON格式给出一个学生的姓名、年龄和班级。", "列出五种常见的交通工具。"]
CODE_ZH = ["用Python写一个判断闰年的函数。", "用SQL查询每个部门的平均工资。",
           "用Python写一个统计字符串中每个字符出现次数的函数。", "用JavaScript写一个计算数组总和的函数。",
           "用Python读取一个文本文件并打印行数。", "用Go写一个打印九九乘法表的程序。"]


# (task, subjects, templates): every template filled with every subject
FAMILIES_EN: list[tuple[str, list[str], list[str]]] = [
    ("chat", ACTIVITIES_EN, ["What are three tips for {}?", "Give me advice on {}.",
                             "What mistakes do people make when {}?"]),
    ("chat", HOWTO_EN, ["How do I {}?", "What is the easiest way to {}?"]),
    ("chat", WHY_EN, ["Why {}?", "Why {}? Answer for a child."]),
    ("chat", [f"{a} and {b}" for a, b in PAIRS_EN], ["What is the difference between {}?"]),
    ("chat", SITUATIONS_EN, ["What should I prepare for {}?", "Any advice for {}?"]),
    ("writing", [f"{r} about {s}" for r in RECIPIENTS_EN for s in LETTER_SUBJECTS_EN],
     ["Write a letter to {}."]),
    ("writing", OCCASIONS_EN, ["Write a speech for {}.", "Write a short toast for {}."]),
    ("writing", PRODUCTS_EN, ["Write a product description for {}.",
                              "Write a customer review of {}."]),
    ("writing", CHARACTERS_EN, ["Write a short story about {}.", "Tell a bedtime story about {}."]),
    ("writing", PEOPLE_EN, ["Describe a typical day in the life of {}."]),
    ("writing", PLACES_EN, ["Describe how {} changes over a day.",
                            "Describe the sounds and smells of {}."]),
    ("writing", POEM_TOPICS_EN, ["Write a short poem about {}."]),
    ("code", SQL_TASKS, ["Write a SQL query that {}."]),
    ("code", BASH_TASKS, ["Write a shell command that {}."]),
    ("code", [f"{lang} class for {c}" for c in CLASSES for lang in ("Python", "Java", "TypeScript")],
     ["Write a {}."]),
    ("code", SNIPPETS, ["What does this Python line do? {}", "Explain this code step by step: {}"]),
    ("structured", CSV_COLUMNS, ["Return a CSV with the columns {} and four rows."]),
    ("structured", [f"{what} {how}" for what, how in THINGS], ["List {}."]),
    ("structured", [f"{what} and their {attr}" for what, attr in TABLE_ITEMS],
     ["Make a Markdown table of {}."]),
    ("structured", [f"{what} with their {attr}" for what, attr in JSON_ITEMS],
     ["Return a JSON list of {}."]),
    ("structured", YAML_KEYS, ["Write a YAML file with the keys {}."]),
]
FAMILIES_ZH: list[tuple[str, list[str], list[str]]] = [
    ("chat", ACTIVITIES_ZH, ["关于{}，你有什么建议？", "{}有哪些小技巧？"]),
    ("chat", HOWTO_ZH, ["怎样{}？"]),
    ("chat", WHY_ZH, ["为什么{}？"]),
    ("chat", [f"{a}和{b}" for a, b in PAIRS_ZH], ["{}有什么区别？"]),
    ("writing", WRITING_ZH, ["{}"]),
    ("structured", STRUCT_ZH, ["{}"]),
    ("code", CODE_ZH, ["{}"]),
]


def _expand(families: list[tuple[str, list[str], list[str]]]) -> list[tuple[str, str]]:
    return [(task, template.format(subject)) for task, subjects, templates in families
            for subject in subjects for template in templates]


def build_broad_prompts(seed: int = 0) -> list[Prompt]:
    """Every broad prompt, shuffled deterministically by ``seed`` (ids from ``ID_BASE``)."""
    items = sorted({(lang, task, text) for lang, families in (("en", FAMILIES_EN),
                                                              ("zh", FAMILIES_ZH))
                    for task, text in _expand(families)})
    random.Random(seed + 1).shuffle(items)
    return [Prompt(ID_BASE + i, lang, task, text) for i, (lang, task, text) in enumerate(items)]
