"""The prompt set drafters are trained and evaluated on: generated from templates, deterministic.

Tasks (the seeds' task groups): explanation, lists, code, structured fields, summarisation,
long-form, in English and Chinese. Summarisation and code passages come from the Python
standard library's own docstrings and sources (real text, always present, no download).
"""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass

TASKS = ("explanation", "lists", "code", "structured", "summarisation", "long-form")

TOPICS_EN = [
    "photosynthesis", "black holes", "the water cycle", "inflation", "vaccines", "plate tectonics",
    "machine learning", "the French Revolution", "climate change", "blockchain", "DNA replication",
    "the immune system", "compound interest", "the internet", "volcanoes", "electric cars",
    "renewable energy", "the Roman Empire", "quantum computing", "coffee brewing", "sleep",
    "meditation", "public speaking", "gardening", "the stock market", "recycling", "honeybees",
    "the moon landing", "solar panels", "antibiotics", "earthquakes", "rainforests", "nutrition",
    "time management", "remote work", "cybersecurity", "the printing press", "jazz music",
    "chess strategy", "marathon training", "bread baking", "ocean tides", "the human heart",
    "supply and demand", "neural networks", "cloud computing", "databases", "operating systems",
    "Kubernetes", "speculative decoding", "compilers", "the Great Wall of China", "tea culture",
    "urban planning", "3D printing", "electric guitars", "birds migration", "glaciers",
    "the Olympic Games", "smartphones", "learning a new language", "budgeting", "wind turbines",
]
TOPICS_ZH = [
    "光合作用", "黑洞", "水循环", "通货膨胀", "疫苗", "人工智能", "机器学习", "气候变化", "区块链",
    "免疫系统", "复利", "互联网", "火山", "电动汽车", "可再生能源", "长城", "量子计算", "咖啡",
    "睡眠", "冥想", "公开演讲", "园艺", "股票市场", "垃圾分类", "蜜蜂", "登月", "太阳能",
    "抗生素", "地震", "热带雨林", "营养", "时间管理", "远程办公", "网络安全", "印刷术", "茶文化",
    "马拉松", "面包烘焙", "潮汐", "心脏", "供求关系", "神经网络", "云计算", "数据库", "操作系统",
    "城市规划", "春节", "中医", "高铁", "围棋",
]
CODE_TASKS_EN = [
    "reverses a string", "checks whether a number is prime", "computes the nth Fibonacci number",
    "merges two sorted lists", "counts the words in a text", "removes duplicates from a list",
    "finds the largest element in a list", "converts Celsius to Fahrenheit",
    "reads a CSV file and returns its rows", "checks whether a string is a palindrome",
    "flattens a nested list", "computes the factorial of n", "sorts a list of dictionaries by a key",
    "returns the most common character in a string", "implements binary search",
    "validates an email address with a regular expression", "computes the average of a list",
    "parses a date string", "implements a stack class", "sums the digits of an integer",
    "transposes a matrix", "groups words by their first letter", "implements bubble sort",
    "downloads nothing and returns the length of a list", "formats a number with commas",
]
CODE_TASKS_ZH = [
    "反转一个字符串", "判断一个数是否为质数", "计算斐波那契数列的第n项", "合并两个有序列表",
    "统计文本中的单词数量", "删除列表中的重复元素", "找出列表中的最大值", "把摄氏度转换为华氏度",
    "判断字符串是否为回文", "计算n的阶乘", "实现二分查找", "实现一个栈类", "计算列表的平均值",
]
LANGS = ["Python", "JavaScript", "Go", "SQL", "Bash", "Rust", "C"]
PEOPLE_EN = ["a nurse in Boston", "a retired teacher", "a software engineer in Berlin",
             "a farmer in Kenya", "a student in Tokyo", "a chef in Paris", "a pilot",
             "a small bookstore", "a bicycle shop", "a hotel in Rome", "a music festival"]
PEOPLE_ZH = ["北京的一名护士", "一位退休教师", "上海的软件工程师", "一名大学生", "成都的一家火锅店",
             "一家书店", "一场音乐节", "杭州的一家酒店"]
ZH_PASSAGES = [
    "长城是中国古代的军事防御工程，始建于春秋战国时期，秦朝统一后连接成为万里长城。"
    "明朝时期对长城进行了大规模修缮，今天人们看到的大部分长城都是明长城。长城不仅是防御工事，"
    "也是中华民族的象征，每年吸引大量游客前来参观。",
    "茶起源于中国，已有几千年的历史。唐代陆羽写下了《茶经》，系统总结了种茶、制茶和饮茶的方法。"
    "中国茶可以分为绿茶、红茶、乌龙茶、白茶、黄茶和黑茶六大类，不同的茶有不同的制作工艺和风味。",
    "高铁是中国交通发展的重要成果。自2008年京津城际铁路开通以来，中国已经建成了世界上规模最大的"
    "高速铁路网。高铁缩短了城市之间的距离，改变了人们的出行方式，也促进了区域经济的发展。",
    "人工智能是研究如何让计算机模拟人类智能的学科。近年来，深度学习的发展使人工智能在图像识别、"
    "语音识别和自然语言处理等领域取得了突破。与此同时，人们也开始关注人工智能带来的隐私和就业问题。",
    "垃圾分类是指按照一定标准将垃圾分类储存、投放和搬运。常见的分类包括可回收物、有害垃圾、"
    "厨余垃圾和其他垃圾。垃圾分类可以减少环境污染，提高资源利用率，需要每个人的参与。",
    "睡眠对健康非常重要。成年人每天通常需要七到九个小时的睡眠。长期睡眠不足会影响注意力和记忆力，"
    "还会增加患心血管疾病的风险。保持规律的作息、睡前少看手机有助于提高睡眠质量。",
    "春节是中国最重要的传统节日，通常在农历正月初一。人们在春节前打扫房屋、贴春联，除夕夜全家团聚"
    "吃年夜饭，初一开始走亲访友、互相拜年。春节期间还有放鞭炮、发红包等习俗。",
    "围棋起源于中国，是一种两人对弈的策略性棋类游戏。棋盘由纵横各十九条线组成，双方轮流落子，"
    "以围地多者为胜。2016年，人工智能程序AlphaGo战胜了世界冠军李世石，引起了广泛关注。",
]

TEMPLATES_EN = {
    "explanation": ["Explain {t} in simple terms.", "How does {t} work?",
                    "What is {t} and why does it matter?", "Explain {t} to a ten-year-old."],
    "lists": ["List five interesting facts about {t}.", "Give me a numbered list of tips about {t}.",
              "What are the main advantages and disadvantages of {t}? Use bullet points.",
              "List the key steps to get started with {t}."],
    "long-form": ["Write a short essay about {t}.", "Write a blog post about {t}.",
                  "Write a short story that involves {t}.", "Describe the history of {t} in detail."],
}
TEMPLATES_ZH = {
    "explanation": ["请用简单的语言解释{t}。", "{t}是如何运作的？", "什么是{t}？它为什么重要？",
                    "请向一个十岁的孩子解释{t}。"],
    "lists": ["列出关于{t}的五个有趣事实。", "请给出关于{t}的几条建议，用编号列表。",
              "{t}有哪些优点和缺点？请分点说明。"],
    "long-form": ["写一篇关于{t}的短文。", "写一篇关于{t}的博客文章。", "请详细介绍{t}的历史。"],
}


@dataclass(frozen=True)
class Prompt:
    id: int
    lang: str  # "en" | "zh"
    task: str
    text: str


def _stdlib_passages() -> tuple[list[str], list[str]]:
    """English docstring passages and short function sources from the standard library."""
    import collections
    import csv
    import datetime
    import functools
    import itertools
    import json
    import pathlib
    import shutil
    import statistics
    import string
    import textwrap

    docs, codes = [], []
    for mod in (json, csv, collections, functools, itertools, pathlib, shutil, statistics,
                string, textwrap, datetime):
        for _name, obj in sorted(vars(mod).items()):
            doc = inspect.getdoc(obj) if callable(obj) else None
            if doc and 200 <= len(doc) <= 900 and getattr(obj, "__module__", "") == mod.__name__:
                docs.append(doc)
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                try:
                    src = inspect.getsource(obj)
                except (OSError, TypeError):
                    continue
                if 150 <= len(src) <= 700:
                    codes.append(src)
    return docs, codes


def build_prompts(seed: int = 0) -> list[Prompt]:
    """Every prompt the templates make, shuffled deterministically by ``seed``."""
    docs, codes = _stdlib_passages()
    items: list[tuple[str, str, str]] = []
    for lang, topics, templates in (("en", TOPICS_EN, TEMPLATES_EN), ("zh", TOPICS_ZH, TEMPLATES_ZH)):
        for task, forms in templates.items():
            for t in topics:
                for form in forms:
                    items.append((lang, task, form.format(t=t)))
    for task in CODE_TASKS_EN:
        for lang_name in LANGS:
            items.append(("en", "code", f"Write a {lang_name} function that {task}."))
    for task in CODE_TASKS_ZH:
        for lang_name in ("Python", "JavaScript", "Go"):
            items.append(("zh", "code", f"用{lang_name}写一个函数，{task}。"))
    for src in codes:
        items.append(("en", "code", f"Explain what this code does:\n\n```python\n{src}```"))
        items.append(("zh", "code", f"请解释这段代码的作用：\n\n```python\n{src}```"))
    for who in PEOPLE_EN:
        for fields in ("name, age, city and occupation", "name, email, phone and address",
                       "title, date, location and price", "product, quantity, unit_price and total"):
            items.append(("en", "structured",
                          f"Return a JSON object with the fields {fields} for {who}. Output only JSON."))
            items.append(("en", "structured",
                          f"Fill in a YAML record with the fields {fields} for {who}."))
    for who in PEOPLE_ZH:
        for fields in ("姓名、年龄、城市和职业", "名称、地址、电话和营业时间", "标题、日期、地点和价格"):
            items.append(("zh", "structured", f"为{who}生成一个JSON对象，包含字段：{fields}。只输出JSON。"))
    for t in TOPICS_EN:
        items.append(("en", "structured", f"Create a table in Markdown with three rows about {t}."))
    for doc in docs:
        items.append(("en", "summarisation", f"Summarise the following text in two sentences:\n\n{doc}"))
    for passage in ZH_PASSAGES:
        for form in ("请用一句话总结下面这段文字：\n\n{p}", "请概括下面这段话的主要内容：\n\n{p}",
                     "Summarise this Chinese text in English:\n\n{p}"):
            items.append(("zh", "summarisation", form.format(p=passage)))
    items = sorted(set(items))
    random.Random(seed).shuffle(items)
    return [Prompt(i, lang, task, text) for i, (lang, task, text) in enumerate(items)]


def split_prompts(prompts: list[Prompt], n_train: int, n_calib: int, n_test: int
                  ) -> dict[str, list[Prompt]]:
    """Disjoint train / calibration / held-out test splits (test never seen in training)."""
    need = n_train + n_calib + n_test
    if need > len(prompts):
        raise ValueError(f"asked for {need} prompts, the set has {len(prompts)}")
    return {"test": prompts[:n_test], "calib": prompts[n_test:n_test + n_calib],
            "train": prompts[n_test + n_calib:need]}
