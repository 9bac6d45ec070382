#!/usr/bin/env python3
"""Writes the two generated files of this folder, numbers.txt and qa.jsonl, the same
every time (a fixed seed, the standard library only):

  numbers.txt  counting in words, multiplication tables, the calendar: regular text a
               small model learns quickly
  qa.jsonl     {"prompt": ..., "response": ...} records, arithmetic and questions about
               the other texts here, for prepare.py's masks (only responses are trained)

    python3 examples/qwen2/data/make_generated.py   (rewrites both, next to this file)
"""
import json
import os
import random

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
MONTHS = [("January", 31), ("February", 28), ("March", 31), ("April", 30), ("May", 31), ("June", 30),
          ("July", 31), ("August", 31), ("September", 30), ("October", 31), ("November", 30),
          ("December", 31)]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def words(n):
    """n (0 <= n < 1000000) in English words."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + words(rest))
    rest = n % 1000
    head = words(n // 1000) + " thousand"
    if rest == 0:
        return head
    return head + (" and " if rest < 100 else " ") + words(rest)


def numbers_txt():
    out = ["Numbers, Tables and the Calendar", "", "Counting", ""]
    for n in range(1, 201):
        out.append(f"{n} is {words(n)}.")
    out += ["", "Counting in Tens", ""]
    out.append(", ".join(words(n) for n in range(10, 201, 10)) + ".")
    out += ["", "Some Larger Numbers", ""]
    for n in (250, 365, 500, 999, 1000, 1001, 1066, 1492, 1776, 1969, 2000, 2024, 4096, 10000, 65536,
              100000, 999999):
        out.append(f"{n} is {words(n)}.")
    out += ["", "Multiplication Tables", ""]
    for a in range(1, 13):
        out.append(f"The {words(a)} times table:")
        for b in range(1, 13):
            out.append(f"{words(b).capitalize()} times {words(a)} is {words(a * b)}. {b} x {a} = {a * b}.")
        out.append("")
    out += ["Adding and Taking Away", ""]
    rng = random.Random(20240520)
    for _ in range(120):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        if rng.random() < 0.5:
            out.append(f"{words(a).capitalize()} plus {words(b)} is {words(a + b)}. {a} + {b} = {a + b}.")
        else:
            a, b = max(a, b), min(a, b)
            out.append(f"{words(a).capitalize()} minus {words(b)} is {words(a - b)}. {a} - {b} = {a - b}.")
    out += ["", "Even and Odd", ""]
    for n in range(1, 41):
        out.append(f"{words(n).capitalize()} is {'even' if n % 2 == 0 else 'odd'}.")
    out += ["", "The Days of the Week", ""]
    for i, d in enumerate(DAYS):
        out.append(f"{d} is day {words(i + 1)} of the week. After {d} comes {DAYS[(i + 1) % 7]}.")
    out += ["", "The Months of the Year", ""]
    for i, (m, d) in enumerate(MONTHS):
        extra = " In a leap year it has twenty-nine." if m == "February" else ""
        nxt = MONTHS[(i + 1) % 12][0]
        out.append(f"{m} is month {words(i + 1)} of the year. It has {words(d)} days.{extra} After {m} comes {nxt}.")
    out += ["", "A year has twelve months, fifty-two weeks and one day, or three hundred and sixty-five days.",
            "A leap year has three hundred and sixty-six days.",
            "A day has twenty-four hours. An hour has sixty minutes. A minute has sixty seconds.",
            "A week has seven days, which is one hundred and sixty-eight hours.", ""]
    return "\n".join(out)


# Questions about the other texts in this folder, and general ones, answered in a sentence.
QA = [
    ("Why did the fox say the grapes were sour?",
     "Because he could not reach them, and it was easier to despise them than to admit he had failed."),
    ("Who won the race between the tortoise and the hare?",
     "The tortoise won, because the hare stopped to rest and fell asleep."),
    ("What did the ant do all summer?", "She stored food for the winter."),
    ("Why did nobody come when the shepherd boy saw a real wolf?",
     "Because he had lied about a wolf twice before, and the villagers no longer believed him."),
    ("How did the mouse help the lion?", "She gnawed through the rope of the hunter's net and set him free."),
    ("How did the crow reach the water in the pitcher?",
     "She dropped pebbles into the pitcher one by one until the water rose high enough to drink."),
    ("Who made the traveler take off his cloak, the wind or the sun?",
     "The sun, by shining gently and warmly, after the wind had failed by blowing hard."),
    ("Why did the country mouse go home?",
     "She would rather eat plain food in peace than a feast in fear."),
    ("What was inside the goose that laid golden eggs?", "Nothing but an ordinary goose. There was no gold."),
    ("How often does the light at Gull Point flash?", "Once every twenty seconds, with a white flash."),
    ("Who noticed that the light at Gull Point had faltered during the storm?",
     "Tomas, the boy from the village, who counted the flashes from his window."),
    ("What is the first thing the clockmaker taught Nell?", "That every part is where it is for a reason."),
    ("What does a pendulum do in a clock?",
     "It keeps the time by swinging at a steady rate, while the wheels count the swings."),
    ("Why is the sky blue?",
     "Because air scatters blue sunlight much more strongly than red light, so blue light reaches our eyes "
     "from every part of the sky."),
    ("What causes the seasons?",
     "The tilt of the earth's axis, which makes each half of the earth lean toward the sun for part of the "
     "year and away from it for the rest."),
    ("Why does a steel ship float?",
     "Because its hollow shape pushes aside a great deal of water, and that water weighs more than the ship."),
    ("How do plants make their food?",
     "They use the energy of sunlight to join carbon dioxide from the air and water from the soil into sugar."),
    ("How can you tell how far away lightning is?",
     "Count the seconds between the flash and the thunder, and divide by three to get the distance in kilometers."),
    ("Why does a compass point north?",
     "Its needle is a small magnet that lines itself up with the magnetism of the earth."),
    ("What does a bee's dance tell the other bees?", "Which direction to fly and how far to go to find flowers."),
    ("How many hearts does an octopus have?", "Three."),
    ("What does a camel keep in its hump?", "Fat, not water."),
    ("Why do a beaver's teeth not grow too long?", "Gnawing wood wears them down and keeps them the right length."),
    ("Which bird can fly backward?", "The hummingbird."),
    ("How do dolphins find fish in dark water?", "They send out clicks and listen to the echoes."),
    ("Where is the warmest place to keep bread?",
     "Keep it at room temperature in a paper bag. In the refrigerator it goes stale faster."),
    ("What should you do before putting a new tube in a punctured tire?",
     "Run your fingers around the inside of the tire to find and remove whatever caused the puncture."),
    ("How high should a bicycle saddle be?",
     "High enough that your leg is almost straight when the pedal is at the bottom of its turn."),
    ("How deep should a seed be sown?", "At a depth of about twice its own width."),
    ("Is it better to water a garden a little every day or deeply once or twice a week?",
     "Deeply once or twice a week, so that the roots grow down to where the soil stays moist."),
    ("What does 'a stitch in time saves nine' mean?", "Fix small problems early, before they become big ones."),
    ("What does 'red sky at night, sailor's delight' mean?",
     "A red evening sky means the weather to the west is clear, so fair weather is probably coming."),
    ("How many days does September have?", "Thirty."),
    ("What comes after Thursday?", "Friday."),
    ("How many minutes are in an hour?", "Sixty."),
    ("What is the boiling point of water in degrees Celsius?", "One hundred degrees."),
    ("Where did the cousins in the borrowed boat end up?",
     "At the stone bridge at Marlow, where their grandfather was waiting with the trailer."),
    ("What did Ruth keep to remember the hardware shop?", "A jar of screws, which sits on her windowsill."),
    ("How far is the library from the school on the map in Room Nine?",
     "Three centimeters on the map, which is three hundred meters in real life."),
    ("What should you do if you are about to take the last seat in the cafe in Ashby in the morning?",
     "Leave it: it belongs to Mr. Doyle, who has sat in it for thirty years."),
]


def qa_jsonl():
    rng = random.Random(20240801)
    recs = []
    for q, a in QA:
        recs.append({"prompt": f"Question: {q}\nAnswer:", "response": f" {a}\n"})
    for _ in range(300):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        op = rng.choice(["plus", "minus", "times"])
        if op == "minus":
            a, b = max(a, b), min(a, b)
            r = a - b
        elif op == "times":
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            r = a * b
        else:
            r = a + b
        if rng.random() < 0.5:
            recs.append({"prompt": f"Question: What is {a} {op} {b}?\nAnswer:", "response": f" {r}.\n"})
        else:
            recs.append({"prompt": f"Question: What is {words(a)} {op} {words(b)}?\nAnswer:",
                         "response": f" {words(r).capitalize()}.\n"})
    for _ in range(60):
        n = rng.randint(1, 999)
        recs.append({"prompt": f"Question: How do you write {n} in words?\nAnswer:", "response": f" {words(n)}.\n"})
    rng.shuffle(recs)
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "numbers.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(numbers_txt() + "\n")
    with open(os.path.join(here, "qa.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        f.write(qa_jsonl())


if __name__ == "__main__":
    main()
