"""The bundled coding problems, kitae/assets/data/code/problems.jsonl: 30 problems written for kitae.

Each row is an RL prompt for the ``code`` grader and an input for ``kitae curate testcases``::

    {"id": "sum-two", "messages": [{"role": "user", "content": "..."}], "language": "python", "lang": "en",
     "generator": "<a CYaRon program: case number on stdin -> one test input>",
     "solutions": ["<Python source>", ..., {"language": "cpp", "source": "..."}],
     "design": "what the solutions are meant to do (which are wrong, and how)"}

Some reference solutions are wrong on purpose, so that test-case generation has something to catch: a
solution wrong on every input, several sharing one bug (even a majority), a bug that shows only on some
inputs, a crash, an endless loop, a syntax error, an integer overflow in C++; one generator is broken and one
problem has too few solutions. tests/curate/test_testcases.py holds the hand count of what
``kitae curate testcases`` keeps and drops, and why. Rebuild with::

    python scripts/build_code_set.py
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "kitae" / "assets" / "data" / "code" / "problems.jsonl"

# Every generator starts like this: the case number seeds CYaRon's randomness (it draws from `random`).
HEADER = ("import random\nfrom cyaron import String, Vector\n\n"
          "i = int(input())  # the case number: 0, 1, 2, ...\nrandom.seed(i)\n")

ASK = {
    "en": "\n\nThe input comes on standard input; print the answer to standard output. "
          "Write a Python 3 program in one ```python code block.",
    "ja": "\n\n入力は標準入力から与えられます。答えを標準出力に出力する Python 3 のプログラムを、"
          "```python のコードブロック1つで書いてください。",
}

PROBLEMS: list[dict] = []


def problem(id: str, statement: str, generator: str, solutions: list, design: str, lang: str = "en") -> None:
    PROBLEMS.append({"id": id, "messages": [{"role": "user", "content": statement.strip() + ASK[lang]}],
                     "language": "python", "lang": lang, "generator": HEADER + generator.strip() + "\n",
                     "solutions": [s.strip() + "\n" if isinstance(s, str) else s for s in solutions],
                     "design": design})


def cpp(source: str) -> dict:
    return {"language": "cpp", "source": source.strip() + "\n"}


# ---- 1 ------------------------------------------------------------------------------------------------
problem("sum-two", """
Read two integers a and b (|a|, |b| <= 10^18) on one line and print a + b.
""", """
print(random.randint(-10**18, 10**18), random.randint(-10**18, 10**18))
""", [
    r'''a, b = map(int, input().split())
print(a + b)''',
    r'''import sys
print(sum(map(int, sys.stdin.read().split())))''',
    r'''x = input().split()
print(int(x[0]) + int(x[1]))''',
    r'''def main():
    a, b = (int(t) for t in input().split())
    print(a + b)

main()''',
    r'''import sys
a, b = map(int, sys.stdin.readline().split())
sys.stdout.write(str(a + b) + "\n")''',
    r'''nums = list(map(int, open(0).read().split()))
print(nums[0] + nums[1])''',
    r'''from operator import add
print(add(*map(int, input().split())))''',
    r'''a, b = input().split()
print(int(a) - -int(b))''',
    r'''import sys
data = sys.stdin.buffer.read().split()
print(int(data[0]) + int(data[1]))''',
    r'''print(sum(int(t) for t in input().split()))''',
], "10 correct")

# ---- 2 ------------------------------------------------------------------------------------------------
problem("max-of-list", """
The first line holds n (2 <= n <= 20), the second n distinct integers between -1000 and 1000. Print the largest.
""", """
n = random.randint(2, 20)
values = [v[0] for v in Vector.random(n, [(-1000, 1000)])]  # distinct
print(n)
print(*values)
""", [
    r'''input()
print(max(map(int, input().split())))''',
    r'''n = int(input())
a = list(map(int, input().split()))
print(sorted(a)[-1])''',
    r'''n = int(input())
a = list(map(int, input().split()))
best = a[0]
for x in a[1:]:
    if x > best:
        best = x
print(best)''',
    r'''from functools import reduce
input()
print(reduce(lambda x, y: x if x > y else y, map(int, input().split())))''',
    r'''import sys
tokens = sys.stdin.read().split()
print(max(int(t) for t in tokens[1:]))''',
    r'''n = int(input())
a = sorted(map(int, input().split()), reverse=True)
print(a[0])''',
    r'''import heapq
input()
print(heapq.nlargest(1, map(int, input().split()))[0])''',
    r'''n = int(input())
a = [int(x) for x in input().split()]
print(-min(-x for x in a))''',
    r'''n = int(input())
a = list(map(int, input().split()))
i = max(range(n), key=lambda k: a[k])
print(a[i])''',
    r'''n = int(input())
a = list(map(int, input().split()))
print(sorted(a)[-2])''',
], "9 correct; the last prints the second largest (wrong on every input)")

# ---- 3 ------------------------------------------------------------------------------------------------
problem("reverse-string", """
Read a word of lowercase letters (1 to 50 letters) and print it reversed.
""", """
print(String.random((1, 50)))
""", [
    r'''print(input()[::-1])''',
    r'''print("".join(reversed(input())))''',
    r'''s = input()
out = ""
for ch in s:
    out = ch + out
print(out)''',
    r'''def rev(s):
    return s if len(s) <= 1 else rev(s[1:]) + s[0]

print(rev(input().strip()))''',
    r'''s = list(input().strip())
s.reverse()
print("".join(s))''',
    r'''s = input().strip()
print("".join(s[i] for i in range(len(s) - 1, -1, -1)))''',
    r'''import sys
print(sys.stdin.readline().rstrip("\n")[::-1])''',
    r'''from collections import deque
d = deque()
for ch in input().strip():
    d.appendleft(ch)
print("".join(d))''',
    r'''s = list(input().strip())
i, j = 0, len(s) - 1
while i < j:
    s[i], s[j] = s[j], s[i]
    i += 1
    j -= 1
print("".join(s))''',
    r'''s = input().strip()
print(s[len(s)::-1])''',
], "10 correct")

# ---- 4 ------------------------------------------------------------------------------------------------
problem("count-vowels", """
Read a line of lowercase words separated by single spaces. Print how many vowels (a, e, i, o, u) it has.
""", """
words = [String.random((1, 8)) for _ in range(random.randint(1, 8))]
print(" ".join(words))
""", [
    r'''print(sum(ch in "aeiou" for ch in input()))''',
    r'''s = input()
print(len([c for c in s if c in "aeiou"]), end="   \n\n")''',
    r'''import sys
s = sys.stdin.readline()
sys.stdout.write(f"{sum(s.count(v) for v in 'aeiou')} \n")''',
    r'''import re
print(len(re.findall("[aeiou]", input())))''',
    r'''s = input()
n = 0
for ch in s:
    if ch in ("a", "e", "i", "o", "u"):
        n += 1
print(n)''',
    r'''from collections import Counter
c = Counter(input())
print(c["a"] + c["e"] + c["i"] + c["o"] + c["u"])''',
    r'''vowels = set("aeiou")
print(sum(1 for ch in input() if ch in vowels))''',
    r'''s = input()
print(len(s) - len(s.translate(str.maketrans("", "", "aeiou"))))''',
    r'''print("\n" + str(sum(map(input().count, "aeiou"))))''',
    r'''s = input()
print(sum(s.count(v) for v in "aeiou"), "")''',
], "10 correct; some print extra spaces or blank lines, which the token comparison ignores")

# ---- 5 ------------------------------------------------------------------------------------------------
problem("fizzbuzz", """
Read n (3 <= n <= 102). For each i from 1 to n print one line: FizzBuzz if i is divisible by 15, Fizz if by 3,
Buzz if by 5, else i.
""", """
print(3 + 2 * i + random.randint(0, 1))  # distinct for every case number
""", [
    r'''n = int(input())
for i in range(1, n + 1):
    print("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else i)''',
    r'''n = int(input())
for i in range(1, n + 1):
    s = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
    print(s or i)''',
    r'''n = int(input())
out = []
for i in range(1, n + 1):
    if i % 15 == 0:
        out.append("FizzBuzz")
    elif i % 3 == 0:
        out.append("Fizz")
    elif i % 5 == 0:
        out.append("Buzz")
    else:
        out.append(str(i))
print("\n".join(out))''',
    r'''n = int(input())
print(*[("Fizz" * (i % 3 == 0) + "Buzz" * (i % 5 == 0)) or str(i) for i in range(1, n + 1)], sep="\n")''',
    r'''def word(i):
    if i % 15 == 0:
        return "FizzBuzz"
    if i % 3 == 0:
        return "Fizz"
    if i % 5 == 0:
        return "Buzz"
    return str(i)

for i in range(1, int(input()) + 1):
    print(word(i))''',
    r'''import sys
n = int(sys.stdin.readline())
words = {0: "FizzBuzz", 3: "Fizz", 6: "Fizz", 9: "Fizz", 12: "Fizz", 5: "Buzz", 10: "Buzz"}
sys.stdout.write("\n".join(words.get(i % 15, str(i)) for i in range(1, n + 1)) + "\n")''',
    r'''n = int(input())
i = 1
while i <= n:
    line = ""
    if i % 3 == 0:
        line += "Fizz"
    if i % 5 == 0:
        line += "Buzz"
    print(line if line else i)
    i += 1''',
    r'''n = int(input())
for i in range(1, n + 1):
    print([i, "Fizz", "Buzz", "FizzBuzz"][(i % 3 == 0) + 2 * (i % 5 == 0)])''',
    r'''n = int(input())
for i in range(1, n + 1):
    print("FizzBuzz" if i % 15 == 0 else "Buzz" if i % 3 == 0 else "Fizz" if i % 5 == 0 else i)''',
    r'''n = int(input())
for i in range(1, n):
    print("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else i)''',
], "8 correct; one swaps Fizz and Buzz, one stops at n - 1 (both wrong on every input)")

# ---- 6 ------------------------------------------------------------------------------------------------
problem("gcd", """
Read two integers a and b (1 <= a, b <= 10^12) and print their greatest common divisor.
""", """
g = random.randint(1, 10**6)
print(g * random.randint(1, 10**6), g * random.randint(1, 10**6))
""", [
    r'''import math
a, b = map(int, input().split())
print(math.gcd(a, b))''',
    r'''a, b = map(int, input().split())
while b:
    a, b = b, a % b
print(a)''',
    r'''def gcd(a, b):
    return a if b == 0 else gcd(b, a % b)

a, b = map(int, input().split())
print(gcd(a, b))''',
    r'''from fractions import Fraction
a, b = map(int, input().split())
print(a // Fraction(a, b).numerator)''',
    r'''from functools import reduce
from math import gcd
print(reduce(gcd, map(int, input().split())))''',
    r'''a, b = map(int, input().split())
if a < b:
    a, b = b, a
while a % b:
    a, b = b, a % b
print(b)''',
    r'''import sys
a, b = map(int, sys.stdin.read().split())
def g(x, y):
    while y:
        x, y = y, x % y
    return x
print(g(max(a, b), min(a, b)))''',
    r'''import math
x = list(map(int, input().split()))
print(math.gcd(*x))''',
    r'''a, b = map(int, input().split())
def binary_gcd(a, b):
    shift = 0
    while (a | b) & 1 == 0:
        a >>= 1
        b >>= 1
        shift += 1
    while a & 1 == 0:
        a >>= 1
    while b:
        while b & 1 == 0:
            b >>= 1
        if a > b:
            a, b = b, a
        b -= a
    return a << shift
print(binary_gcd(a, b))''',
    r'''import math
a, b = map(int, input().split())
print(a * b // math.lcm(a, b))''',
], "10 correct")

# ---- 7 ------------------------------------------------------------------------------------------------
problem("prime-check", """
Read n (1 <= n <= 10^6). Print yes if n is prime, no otherwise.
""", """
print(1 if i == 0 else random.randint(2, 10**6))  # case 0 is n = 1, which is not prime
""", [
    r'''n = int(input())
print("yes" if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else "no")''',
    r'''import math
n = int(input())
ok = n >= 2
for d in range(2, math.isqrt(n) + 1):
    if n % d == 0:
        ok = False
        break
print("yes" if ok else "no")''',
    r'''def is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    d = 3
    while d * d <= n:
        if n % d == 0:
            return False
        d += 2
    return True

print("yes" if is_prime(int(input())) else "no")''',
    r'''n = int(input())
f = 1
for k in range(2, n):
    f = f * k % n
print("yes" if n > 1 and f == n - 1 else "no")''',
    r'''n = int(input())
sieve = bytearray([1]) * (n + 1)
sieve[0] = 0
if n >= 1:
    sieve[1] = 0
for p in range(2, int(n ** 0.5) + 1):
    if sieve[p]:
        sieve[p * p :: p] = bytearray(len(range(p * p, n + 1, p)))
print("yes" if sieve[n] else "no")''',
    r'''n = int(input())
count = sum(1 for d in range(1, int(n ** 0.5) + 1) if n % d == 0)
print("yes" if n > 1 and count == 1 else "no")''',
    r'''def miller_rabin(n):
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13):
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in (2, 3, 5, 7, 11):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True

print("yes" if miller_rabin(int(input())) else "no")''',
    r'''import sys
n = int(sys.stdin.read())
answer = "no"
if n >= 2:
    answer = "yes"
    i = 2
    while i * i <= n:
        if n % i == 0:
            answer = "no"
            break
        i += 1
print(answer)''',
    r'''n = int(input())
print(["no", "yes"][n > 1 and not any(n % d == 0 for d in range(2, int(n ** 0.5) + 1))])''',
    r'''n = int(input())
divisors = [d for d in range(1, n + 1) if n % d == 0]
print(("no", "yes")[divisors[1] == n])''',
], "9 correct; the last crashes (IndexError) on n = 1, which case 0 always is")

# ---- 8 ------------------------------------------------------------------------------------------------
problem("sort-numbers", """
The first line holds n (1 <= n <= 50), the second n integers between -10^9 and 10^9. Print them in
ascending order on one line, separated by spaces.
""", """
n = random.randint(1, 50)
print(n)
print(*[random.randint(-10**9, 10**9) for _ in range(n)])
""", [
    r'''input()
print(*sorted(map(int, input().split())))''',
    r'''n = int(input())
a = list(map(int, input().split()))
a.sort()
print(" ".join(map(str, a)))''',
    r'''n = int(input())
a = list(map(int, input().split()))
for i in range(n):
    for j in range(n - 1 - i):
        if a[j] > a[j + 1]:
            a[j], a[j + 1] = a[j + 1], a[j]
print(*a)''',
    r'''def merge_sort(a):
    if len(a) <= 1:
        return a
    mid = len(a) // 2
    left, right = merge_sort(a[:mid]), merge_sort(a[mid:])
    out = []
    while left and right:
        out.append(left.pop(0) if left[0] <= right[0] else right.pop(0))
    return out + left + right

input()
print(*merge_sort(list(map(int, input().split()))))''',
    r'''import heapq
input()
h = list(map(int, input().split()))
heapq.heapify(h)
print(*[heapq.heappop(h) for _ in range(len(h))])''',
    r'''import sys
data = sys.stdin.read().split()
print(" ".join(str(x) for x in sorted(int(t) for t in data[1:])))''',
    r'''n = int(input())
a = list(map(int, input().split()))
out = []
while a:
    m = min(a)
    a.remove(m)
    out.append(m)
print(*out)''',
    r'''n = int(input())
a = list(map(int, input().split()))
for i in range(1, n):
    x, j = a[i], i - 1
    while j >= 0 and a[j] > x:
        a[j + 1] = a[j]
        j -= 1
    a[j + 1] = x
print(*a)''',
    r'''input()
print(*sorted(input().split(), key=int))''',
    r'''def quick(a):
    if len(a) <= 1:
        return a
    p = a[len(a) // 2]
    return quick([x for x in a if x < p]) + [x for x in a if x == p] + quick([x for x in a if x > p])

input()
print(*quick([int(x) for x in input().split()]))''',
], "10 correct")

# ---- 9 ------------------------------------------------------------------------------------------------
problem("palindrome", """
Read a word of lowercase letters. Print YES if it reads the same backwards, NO otherwise.
""", """
half = String.random((1, 10))
print(half + half[::-1] if i % 2 else half + String.random((1, 10)))
""", [
    r'''s = input().strip()
print("YES" if s == s[::-1] else "NO")''',
    r'''s = input().strip()
ok = all(s[k] == s[-1 - k] for k in range(len(s) // 2))
print("YES" if ok else "NO")''',
    r'''s = input().strip()
i, j = 0, len(s) - 1
while i < j and s[i] == s[j]:
    i += 1
    j -= 1
print("YES" if i >= j else "NO")''',
    r'''def pal(s):
    return len(s) < 2 or (s[0] == s[-1] and pal(s[1:-1]))

print("YES" if pal(input().strip()) else "NO")''',
    r'''s = input().strip()
print(["NO", "YES"][s == "".join(reversed(s))])''',
    r'''from collections import deque
d = deque(input().strip())
ok = True
while len(d) > 1:
    if d.popleft() != d.pop():
        ok = False
        break
print("YES" if ok else "NO")''',
    r'''import sys
s = sys.stdin.readline().strip()
sys.stdout.write(("YES" if s == s[::-1] else "NO") + "\n")''',
    r'''s = input().strip()
print("NO" if s == s[::-1] else "YES")''',
    r'''s = input().strip()
same = s == "".join(reversed(s))
print("YES" if not same else "NO")''',
    r'''s = input().strip()
print(["YES", "NO"][all(a == b for a, b in zip(s, reversed(s)))])''',
], "7 correct; the last 3 share one bug (YES and NO swapped), wrong on every input")

# ---- 10 -----------------------------------------------------------------------------------------------
problem("word-count", """
Read a line of words separated by single spaces (at least one word). Print the number of words.
""", """
print(" ".join(String.random((1, 8)) for _ in range(random.randint(1, 12))))
""", [
    r'''print(len(input().split()))''',
    r'''import re
print(len(re.findall(r"\S+", input())))''',
    r'''s = input()
print(sum(1 for k, ch in enumerate(s) if ch != " " and (k == 0 or s[k - 1] == " ")))''',
    r'''print(input().count(" "))''',
    r'''s = input()
print(sum(ch == " " for ch in s))''',
    r'''import sys
print(sys.stdin.readline().rstrip("\n").count(" "))''',
    r'''s = input()
spaces = 0
for ch in s:
    if ch == " ":
        spaces += 1
print(spaces)''',
    r'''s = input()
print(len(s) - len(s.replace(" ", "")))''',
    r'''from collections import Counter
print(Counter(input())[" "])''',
    r'''s = input()
print(len([k for k in range(len(s)) if s[k] == " "]))''',
], "3 correct; the last 7 share one bug (they count spaces: one less than the words): a wrong majority")

# ---- 11 -----------------------------------------------------------------------------------------------
problem("digit-sum", """
Read an integer n (10 <= n <= 10^18). Print the sum of its decimal digits.
""", """
print(random.randint(10, 10**18))
""", [
    r'''print(sum(map(int, input().strip())))''',
    r'''n = int(input())
s = 0
while n:
    s += n % 10
    n //= 10
print(s)''',
    r'''print(sum(int(d) for d in str(int(input()))))''',
    r'''def ds(n):
    return 0 if n == 0 else n % 10 + ds(n // 10)

print(ds(int(input())))''',
    r'''import sys
print(sum(ord(c) - 48 for c in sys.stdin.read().strip()))''',
    r'''s = input().strip()
print(sum(map(int, s[1:])))''',
    r'''n = int(input())
s = 0
while n >= 10:
    s += n % 10
    n //= 10
print(s)''',
    r'''digits = list(input().strip())
digits.pop(0)
print(sum(int(d) for d in digits))''',
    r'''s = input().strip()
print(sum(int(s[k]) for k in range(1, len(s))))''',
    r'''n = input().strip()
total = 0
for d in n[1:]:
    total += int(d)
print(total)''',
], "5 correct; 5 leave out the first digit (wrong on every input): no output ever has 7 votes")

# ---- 12 -----------------------------------------------------------------------------------------------
problem("balanced-brackets", """
Read a string of ( and ). Print YES if the brackets are balanced (every ( is closed by a later ), in order),
NO otherwise.
""", """
k = i // 2 + 1  # pairs; case numbers 2m and 2m + 1 share a length, and no two of either parity do
if i % 2 == 0:
    print(")(" * k)  # as many ( as ), in the wrong order
else:  # a random balanced string: open while allowed and the coin says so, close otherwise
    out, opened, closed = [], 0, 0
    while len(out) < 2 * k:
        if opened < k and (opened == closed or random.random() < 0.5):
            out.append("(")
            opened += 1
        else:
            out.append(")")
            closed += 1
    print("".join(out))
""", [
    r'''s = input().strip()
depth = 0
for ch in s:
    depth += 1 if ch == "(" else -1
    if depth < 0:
        break
print("YES" if depth == 0 else "NO")''',
    r'''s = input().strip()
stack = []
ok = True
for ch in s:
    if ch == "(":
        stack.append(ch)
    elif stack:
        stack.pop()
    else:
        ok = False
        break
print("YES" if ok and not stack else "NO")''',
    r'''s = input().strip()
while "()" in s:
    s = s.replace("()", "")
print("NO" if s else "YES")''',
    r'''from itertools import accumulate
s = input().strip()
d = list(accumulate(1 if c == "(" else -1 for c in s))
print("YES" if not d or (min(d) >= 0 and d[-1] == 0) else "NO")''',
    r'''import sys
s = sys.stdin.readline().strip()
bal, low = 0, 0
for c in s:
    bal += (c == "(") - (c == ")")
    low = min(low, bal)
print("YES" if bal == 0 and low == 0 else "NO")''',
    r'''def balanced(s):
    depth = 0
    for c in s:
        depth += {"(": 1, ")": -1}[c]
        if depth < 0:
            return False
    return depth == 0

print("YES" if balanced(input().strip()) else "NO")''',
    r'''s = input().strip()
print("YES" if s.count("(") == s.count(")") else "NO")''',
    r'''s = input().strip()
n = 0
for c in s:
    n += 1 if c == "(" else -1
print("YES" if n == 0 else "NO")''',
    r'''from collections import Counter
c = Counter(input().strip())
print("YES" if c["("] == c[")"] else "NO")''',
    r'''s = input().strip()
print(["NO", "YES"][sum(1 if c == "(" else -1 for c in s) == 0])''',
], "6 correct; 4 only compare the counts of ( and ), so they say YES to )( ... : wrong on the even case "
   "numbers only, where 6 of 10 agree (not 7): those cases go, the odd ones stay and all 10 pass them")

# ---- 13 -----------------------------------------------------------------------------------------------
problem("fibonacci", """
Read n (0 <= n <= 10^5). Print the n-th Fibonacci number modulo 1000000007 (F(0) = 0, F(1) = 1).
""", """
print(0 if i == 0 else random.randint(1, 10**5))  # case 0 is n = 0
""", [
    r'''n = int(input())
a, b = 0, 1
for _ in range(n):
    a, b = b, (a + b) % 1000000007
print(a)''',
    r'''M = 10**9 + 7
n = int(input())
f = [0, 1]
for k in range(2, n + 1):
    f.append((f[-1] + f[-2]) % M)
print(f[n])''',
    r'''M = 10**9 + 7
def mat_mult(x, y):
    return [[(x[0][0] * y[0][0] + x[0][1] * y[1][0]) % M, (x[0][0] * y[0][1] + x[0][1] * y[1][1]) % M],
            [(x[1][0] * y[0][0] + x[1][1] * y[1][0]) % M, (x[1][0] * y[0][1] + x[1][1] * y[1][1]) % M]]

def fib(n):
    result, base = [[1, 0], [0, 1]], [[1, 1], [1, 0]]
    while n:
        if n & 1:
            result = mat_mult(result, base)
        base = mat_mult(base, base)
        n >>= 1
    return result[0][1]

print(fib(int(input())))''',
    r'''M = 1000000007
def fast(n):
    if n == 0:
        return 0, 1
    a, b = fast(n // 2)
    c = a * (2 * b - a) % M
    d = (a * a + b * b) % M
    return (d, (c + d) % M) if n % 2 else (c, d)

print(fast(int(input()))[0])''',
    r'''import sys
n = int(sys.stdin.readline())
x, y = 0, 1
i = 0
while i < n:
    x, y = y, (x + y) % 1000000007
    i += 1
print(x)''',
    r'''from functools import lru_cache
import sys
sys.setrecursionlimit(10000)
M = 10**9 + 7

@lru_cache(maxsize=None)
def f(n):
    if n < 2:
        return n
    h = n // 2
    if n % 2 == 0:
        return f(h) * (2 * f(h - 1) + f(h)) % M
    return (f(h) ** 2 + f(h + 1) ** 2) % M

print(f(int(input())))''',
    r'''n = int(input())
prev, cur = 1, 0
for _ in range(n):
    prev, cur = cur, (prev + cur) % 1000000007
print(cur)''',
    r'''M = 10**9 + 7
n = int(input())
fib = [0] * (n + 2)
fib[1] = 1
for k in range(2, n + 1):
    fib[k] = (fib[k - 1] + fib[k - 2]) % M
print(fib[n])''',
    r'''n = int(input())
a, b = 0, 1
for _ in range(n):
    a, b = b, a + b
    if b >= 1000000007 * 1000:
        a %= 1000000007
        b %= 1000000007
print(a % 1000000007)''',
    r'''n = int(input())
MOD = 10**9 + 7
a, b = 0, 1
k = 1
while k != n:
    a, b = b, (a + b) % MOD
    k += 1
print(b if n else a)''',
], "9 correct; the last never ends for n = 0 (case 0): a time-out there")

# ---- 14 -----------------------------------------------------------------------------------------------
problem("pair-sum", """
The first line holds n (2 <= n <= 100) and a target t; the second n integers between -1000 and 1000. Print
YES if two numbers at different positions add up to t, NO otherwise.
""", """
n = random.randint(2, 100)
a = [random.randint(-1000, 1000) for _ in range(n)]
t = a[random.randrange(n)] + a[random.randrange(n)] if i % 2 else random.randint(-2000, 2000)
print(n, t)
print(*a)
""", [
    r'''n, t = map(int, input().split())
a = list(map(int, input().split()))
seen = set()
ok = False
for x in a:
    if t - x in seen:
        ok = True
    seen.add(x)
print("YES" if ok else "NO")''',
    r'''n, t = map(int, input().split())
a = list(map(int, input().split()))
print("YES" if any(a[i] + a[j] == t for i in range(n) for j in range(i + 1, n)) else "NO")''',
    r'''n, t = map(int, input().split())
a = sorted(map(int, input().split()))
i, j = 0, n - 1
ok = False
while i < j:
    s = a[i] + a[j]
    if s == t:
        ok = True
        break
    if s < t:
        i += 1
    else:
        j -= 1
print("YES" if ok else "NO")''',
    r'''from itertools import combinations
n, t = map(int, input().split())
a = list(map(int, input().split()))
print("YES" if any(x + y == t for x, y in combinations(a, 2)) else "NO")''',
    r'''from collections import Counter
n, t = map(int, input().split())
c = Counter(map(int, input().split()))
ok = any((t - x in c) and (t - x != x or c[x] > 1) for x in c)
print("YES" if ok else "NO")''',
    r'''import sys
data = list(map(int, sys.stdin.read().split()))
n, t, a = data[0], data[1], data[2:]
found = False
for i in range(n):
    for j in range(n):
        if i != j and a[i] + a[j] == t:
            found = True
print("YES" if found else "NO")''',
    r'''import bisect
n, t = map(int, input().split())
a = sorted(map(int, input().split()))
ok = False
for i, x in enumerate(a):
    k = bisect.bisect_left(a, t - x, i + 1)
    if k < n and a[k] == t - x:
        ok = True
print("YES" if ok else "NO")''',
    r'''n, t = map(int, input().split())
a = list(map(int, input().split()))
index = {}
for i, x in enumerate(a):
    index.setdefault(x, []).append(i)
print("YES" if any(len([j for j in index.get(t - x, []) if j != i]) for i, x in enumerate(a)) else "NO")''',
    r'''n, t = map(int, input().split())
a = list(map(int, input().split()))
sums = {a[i] + a[j] for i in range(n) for j in range(i)}
print("YES" if t in sums else "NO")''',
    r'''def solve():
    n, t = map(int, input().split())
    a = list(map(int, input().split()))
    have = set()
    for x in a:
        if t - x in have:
            return "YES"
        have.add(x)
    return "NO"

print(solve())''',
], "10 correct")

# ---- 15 -----------------------------------------------------------------------------------------------
problem("transpose", """
The first line holds r and c (1 <= r, c <= 6), then r lines of c integers. Print the transposed matrix: c
lines of r integers separated by spaces.
""", """
r, c = random.randint(1, 6), random.randint(1, 6)
print(r, c)
for _ in range(r):
    print(*[random.randint(-99, 99) for _ in range(c)])
""", [
    r'''r, c = map(int, input().split())
m = [input().split() for _ in range(r)]
for row in zip(*m):
    print(*row)''',
    r'''r, c = map(int, input().split())
m = [list(map(int, input().split())) for _ in range(r)]
for j in range(c):
    print(" ".join(str(m[i][j]) for i in range(r)))''',
    r'''import sys
data = sys.stdin.read().split()
r, c = int(data[0]), int(data[1])
v = data[2:]
for j in range(c):
    print(" ".join(v[i * c + j] for i in range(r)))''',
    r'''r, c = map(int, input().split())
m = [input().split() for _ in range(r)]
t = [[m[i][j] for i in range(r)] for j in range(c)]
print("\n".join(" ".join(row) for row in t))''',
    r'''r, c = map(int, input().split())
rows = [list(map(int, input().split())) for _ in range(r)]
cols = list(map(list, zip(*rows)))
for col in cols:
    print(*col)''',
    r'''r, c = map(int, input().split())
m = [input().split() for _ in range(r)]
out = [[""] * r for _ in range(c)]
for i in range(r):
    for j in range(c):
        out[j][i] = m[i][j]
for line in out:
    print(" ".join(line))''',
    r'''def transpose(m):
    return [list(col) for col in zip(*m)]

r, c = map(int, input().split())
for row in transpose([input().split() for _ in range(r)]):
    print(*row)''',
    r'''r, c = map(int, input().split())
flat = []
for _ in range(r):
    flat += input().split()
for j in range(c):
    print(*flat[j::c])''',
    r'''import sys
lines = sys.stdin.read().strip().split("\n")
r, c = map(int, lines[0].split())
m = [l.split() for l in lines[1:1 + r]]
sys.stdout.write("\n".join(" ".join(m[i][j] for i in range(r)) for j in range(c)) + "\n")''',
    r'''r, c = map(int, input().split())
m = [input().split() for _ in range(r)]
for j in range(c):
    line = []
    for i in range(r):
        line.append(m[i][j])
    print(" ".join(line))''',
], "10 correct")

# ---- 16 -----------------------------------------------------------------------------------------------
problem("prefix-sums", """
The first line holds n (2 <= n <= 20), the second n integers between 1100000000 and 1999999999. Print the n prefix
sums (the first number, the first two added, ...) on one line, separated by spaces.
""", """
n = random.randint(2, 20)
print(n)
print(*[random.randint(11 * 10**8, 2 * 10**9 - 1) for _ in range(n)])  # any two overflow a 32-bit int
""", [
    r'''from itertools import accumulate
input()
print(*accumulate(map(int, input().split())))''',
    r'''n = int(input())
a = list(map(int, input().split()))
s = 0
out = []
for x in a:
    s += x
    out.append(s)
print(*out)''',
    r'''n = int(input())
a = list(map(int, input().split()))
for i in range(1, n):
    a[i] += a[i - 1]
print(" ".join(map(str, a)))''',
    r'''import sys
data = list(map(int, sys.stdin.read().split()))
print(*[sum(data[1:k + 2]) for k in range(data[0])])''',
    r'''n = int(input())
a = list(map(int, input().split()))
p = [0]
for x in a:
    p.append(p[-1] + x)
print(*p[1:])''',
    r'''from functools import reduce
input()
print(*reduce(lambda acc, x: acc + [acc[-1] + x] if acc else [x], map(int, input().split()), []))''',
    r'''n = int(input())
a = list(map(int, input().split()))
print(*[sum(a[:k + 1]) for k in range(n)])''',
    cpp(r'''#include <iostream>
int main() {
    int n; std::cin >> n;
    long long s = 0;
    for (int i = 0; i < n; ++i) { long long x; std::cin >> x; s += x; std::cout << s << (i + 1 < n ? ' ' : '\n'); }
}'''),
    cpp(r'''#include <cstdio>
#include <vector>
int main() {
    int n; if (scanf("%d", &n) != 1) return 1;
    std::vector<long long> p(n + 1, 0);
    for (int i = 1; i <= n; ++i) { long long x; scanf("%lld", &x); p[i] = p[i - 1] + x; }
    for (int i = 1; i <= n; ++i) printf("%lld%c", p[i], i == n ? '\n' : ' ');
}'''),
    cpp(r'''#include <iostream>
int main() {
    int n; std::cin >> n;
    int s = 0;
    for (int i = 0; i < n; ++i) { int x; std::cin >> x; s += x; std::cout << s << (i + 1 < n ? ' ' : '\n'); }
}'''),
], "7 Python and 2 C++ correct; the last (C++) adds in int and overflows on every input")

# ---- 17 -----------------------------------------------------------------------------------------------
problem("rock-paper-scissors", """
Read one letter: R (rock), P (paper) or S (scissors). Print the letter of the move that beats it.
""", """
print("RPS"[i % 3])  # only three inputs exist: the rest are repeats
""", [
    r'''print({"R": "P", "P": "S", "S": "R"}[input().strip()])''',
    r'''m = input().strip()
print("P" if m == "R" else "S" if m == "P" else "R")''',
    r'''m = input().strip()
order = "RPS"
print(order[(order.index(m) + 1) % 3])''',
    r'''import sys
print("PSR"["RPS".index(sys.stdin.read().strip())])''',
    r'''m = input().strip()
if m == "R":
    print("P")
elif m == "P":
    print("S")
else:
    print("R")''',
    r'''beats = dict(zip("RPS", "PSR"))
print(beats[input().strip()])''',
    r'''m = input().strip()
for a, b in (("R", "P"), ("P", "S"), ("S", "R")):
    if a == m:
        print(b)''',
    r'''m = input().strip()
print(chr({82: 80, 80: 83, 83: 82}[ord(m)]))''',
    r'''moves = ["R", "P", "S"]
m = input().strip()
print(moves[moves.index(m) - 2])''',
    r'''print("RPS"[("RPS".find(input().strip()) + 1) % 3])''',
], "10 correct; the generator can only make 3 distinct inputs")

# ---- 18 -----------------------------------------------------------------------------------------------
problem("distinct-count", """
The first line holds n (1 <= n <= 100), the second n integers between 1 and 20. Print how many different
values there are.
""", """
n = random.randint(1, 100)
print(n)
print(*[random.randint(1, 20) for _ in range(n)])
""", [
    r'''input()
print(len(set(input().split())))''',
    r'''input()
print(len(set(map(int, input().split()))))''',
    r'''from collections import Counter
input()
print(len(Counter(input().split())))''',
    r'''n = int(input())
a = sorted(map(int, input().split()))
print(1 + sum(a[k] != a[k - 1] for k in range(1, n)))''',
    r'''n = int(input())
seen = []
for x in input().split():
    if x not in seen:
        seen.append(x)
print(len(seen))''',
    r'''import sys
print(len(set(sys.stdin.read().split()[1:])))''',
    r'''input()
print(len(dict.fromkeys(map(int, input().split()))))''',
    r'''n = int(input())
present = [False] * 21
for x in map(int, input().split()):
    present[x] = True
print(sum(present))''',
    r'''input()
values = set()
for x in input().split():
    values.add(int(x))
print(len(values))''',
    r'''n = int(input()
print(len(set(input().split())))''',
], "9 correct; the last does not compile (a missing parenthesis)")

# ---- 19 -----------------------------------------------------------------------------------------------
problem("longest-word", """
Read a line of lowercase words separated by single spaces. Print the longest word (the first one, if several
are equally long).
""", """
words = [String.random_word((1, 10)) for _ in range(random.randint(1, 10))]  # no such function: a broken generator
print(" ".join(words))
""", [
    r'''print(max(input().split(), key=len))''',
    r'''words = input().split()
best = words[0]
for w in words:
    if len(w) > len(best):
        best = w
print(best)''',
    r'''words = input().split()
m = max(map(len, words))
print(next(w for w in words if len(w) == m))''',
    r'''import sys
words = sys.stdin.readline().split()
print(sorted(enumerate(words), key=lambda p: (-len(p[1]), p[0]))[0][1])''',
    r'''words = input().split()
i = max(range(len(words)), key=lambda k: (len(words[k]), -k))
print(words[i])''',
    r'''from functools import reduce
print(reduce(lambda a, b: b if len(b) > len(a) else a, input().split()))''',
    r'''best = ""
for w in input().split():
    best = w if len(w) > len(best) else best
print(best)''',
    r'''words = input().split()
lengths = [len(w) for w in words]
print(words[lengths.index(max(lengths))])''',
    r'''import re
print(max(re.findall("[a-z]+", input()), key=len))''',
    r'''def longest(ws):
    return ws[0] if len(ws) == 1 else (ws[0] if len(ws[0]) >= len(longest(ws[1:])) else longest(ws[1:]))

print(longest(input().split()))''',
], "10 correct, but the generator calls a function CYaRon does not have: no test input at all")

# ---- 20 -----------------------------------------------------------------------------------------------
problem("triangle-type", """
Read three side lengths a, b, c (1 to 100) that form a triangle. Print equilateral, isosceles or scalene.
""", """
a = random.randint(1, 100)
b = random.randint(1, 100)
c = random.randint(abs(a - b) + 1, min(100, a + b - 1))
print(a, b, c)
""", [
    r'''a, b, c = map(int, input().split())
k = len({a, b, c})
print(["", "equilateral", "isosceles", "scalene"][k])''',
    r'''a, b, c = map(int, input().split())
if a == b == c:
    print("equilateral")
elif a == b or b == c or a == c:
    print("isosceles")
else:
    print("scalene")''',
    r'''s = input().split()
print({1: "equilateral", 2: "isosceles", 3: "scalene"}[len(set(s))])''',
    r'''a, b, c = sorted(map(int, input().split()))
print("equilateral" if a == c else "isosceles" if a == b or b == c else "scalene")''',
    r'''from collections import Counter
m = max(Counter(input().split()).values())
print({3: "equilateral", 2: "isosceles", 1: "scalene"}[m])''',
    r'''import sys
a, b, c = map(int, sys.stdin.read().split())
same = (a == b) + (b == c) + (a == c)
print("equilateral" if same == 3 else "isosceles" if same == 1 else "scalene")''',
], "6 correct: fewer than the 10 solutions Kimi k1.5 samples")

# ---- 21 -----------------------------------------------------------------------------------------------
problem("celsius-to-fahrenheit", """
Read a temperature in degrees Celsius, an integer between -100 and 200. Print it in degrees Fahrenheit
(F = C * 9 / 5 + 32) with exactly one digit after the decimal point.
""", """
print(random.randint(-100, 200))
""", [
    r'''c = int(input())
print(f"{c * 9 / 5 + 32:.1f}")''',
    r'''c = int(input())
print("%.1f" % (c * 1.8 + 32))''',
    r'''c = float(input())
print(format(c * 9 / 5 + 32, ".1f"))''',
    r'''c = int(input())
print("{:.1f}".format(32 + 9 * c / 5))''',
    r'''import sys
c = int(sys.stdin.read())
sys.stdout.write("%.1f\n" % (c * 9.0 / 5.0 + 32.0))''',
    r'''def to_f(c):
    return c * 9 / 5 + 32

print(f"{to_f(int(input())):.1f}")''',
    r'''from decimal import Decimal
c = Decimal(input().strip())
print(f"{c * 9 / 5 + 32:.1f}")''',
    r'''c = int(input())
f = (9 * c + 160) / 5
print(f"{f:.1f}")''',
    r'''c = int(input())
print("%.1f" % ((c * 9 + 160) / 5))''',
    r'''from fractions import Fraction
c = int(input())
print(f"{float(Fraction(9 * c, 5) + 32):.1f}")''',
], "10 correct")

# ---- 22 -----------------------------------------------------------------------------------------------
problem("leap-year", """
Read a year y (1 <= y <= 9999). Print yes if it is a leap year in the Gregorian calendar (divisible by 4,
except centuries not divisible by 400), no otherwise.
""", """
print(1900 if i == 0 else random.randint(1, 9999))  # case 0: a century that is not a leap year
""", [
    r'''y = int(input())
print("yes" if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else "no")''',
    r'''import calendar
print("yes" if calendar.isleap(int(input())) else "no")''',
    r'''y = int(input())
if y % 400 == 0:
    print("yes")
elif y % 100 == 0:
    print("no")
elif y % 4 == 0:
    print("yes")
else:
    print("no")''',
    r'''import datetime
y = int(input())
try:
    datetime.date(y, 2, 29)
    print("yes")
except ValueError:
    print("no")''',
    r'''y = int(input())
print(["no", "yes"][(y % 4 == 0) - (y % 100 == 0) + (y % 400 == 0)])''',
    r'''def leap(y):
    return y % 4 == 0 and not (y % 100 == 0 and y % 400 != 0)

print("yes" if leap(int(input())) else "no")''',
    r'''import sys
y = int(sys.stdin.readline())
print("yes" if (y % 400 == 0) or (y % 4 == 0 and y % 100) else "no")''',
    r'''y = int(input())
days = 366 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 365
print("yes" if days == 366 else "no")''',
    r'''y = int(input())
print("yes" if not y % (16 if y % 25 == 0 else 4) else "no")''',
    r'''y = int(input())
print("yes" if y % 4 == 0 else "no")''',
], "9 correct; the last forgets the century rule, wrong on 1900 (case 0)")

# ---- 23 -----------------------------------------------------------------------------------------------
problem("anagram", """
Read two lowercase words, one per line. Print YES if one is an anagram of the other (the same letters, each
as many times), NO otherwise.
""", """
a = String.random((1, 12))
b = "".join(random.sample(a, len(a))) if i % 2 else String.random(len(a))
print(a)
print(b)
""", [
    r'''a, b = input().strip(), input().strip()
print("YES" if sorted(a) == sorted(b) else "NO")''',
    r'''from collections import Counter
print("YES" if Counter(input().strip()) == Counter(input().strip()) else "NO")''',
    r'''a = input().strip()
b = input().strip()
counts = [0] * 26
for ch in a:
    counts[ord(ch) - 97] += 1
for ch in b:
    counts[ord(ch) - 97] -= 1
print("YES" if not any(counts) else "NO")''',
    r'''import sys
a, b = sys.stdin.read().split()
print("YES" if len(a) == len(b) and all(a.count(c) == b.count(c) for c in set(a)) else "NO")''',
    r'''a, b = input().strip(), input().strip()
rest = list(b)
ok = True
for ch in a:
    if ch in rest:
        rest.remove(ch)
    else:
        ok = False
        break
print("YES" if ok and not rest else "NO")''',
    r'''a, b = input().strip(), input().strip()
print(["NO", "YES"]["".join(sorted(a)) == "".join(sorted(b))])''',
    r'''def signature(w):
    return tuple(w.count(chr(97 + k)) for k in range(26))

print("YES" if signature(input().strip()) == signature(input().strip()) else "NO")''',
    r'''from collections import Counter
a, b = input().strip(), input().strip()
print("YES" if not (Counter(a) - Counter(b)) and not (Counter(b) - Counter(a)) else "NO")''',
    r'''a, b = input().strip(), input().strip()
d = {}
for ch in a:
    d[ch] = d.get(ch, 0) + 1
for ch in b:
    d[ch] = d.get(ch, 0) - 1
print("YES" if all(v == 0 for v in d.values()) else "NO")''',
    r'''import math
PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101]
a, b = input().strip(), input().strip()
print("YES" if math.prod(PRIMES[ord(c) - 97] for c in a) == math.prod(PRIMES[ord(c) - 97] for c in b) else "NO")''',
], "10 correct")

# ---- 24 -----------------------------------------------------------------------------------------------
problem("binary", """
Read n (0 <= n <= 10^12). Print n in binary, without leading zeros (0 prints as 0).
""", """
print(0 if i == 0 else random.randint(1, 10**12))
""", [
    r'''print(bin(int(input()))[2:])''',
    r'''print(format(int(input()), "b"))''',
    r'''n = int(input())
s = ""
while n:
    s = str(n % 2) + s
    n //= 2
print(s or "0")''',
    r'''n = int(input())
print(f"{n:b}")''',
    r'''def to_bin(n):
    return "0" if n == 0 else (to_bin(n // 2).lstrip("0") + str(n % 2))

print(to_bin(int(input())) or "0")''',
    r'''n = int(input())
bits = []
while True:
    bits.append(n & 1)
    n >>= 1
    if not n:
        break
print("".join(map(str, reversed(bits))))''',
    r'''import sys
n = int(sys.stdin.read())
print("{0:b}".format(n))''',
    r'''n = int(input())
if n == 0:
    print(0)
else:
    print("".join("1" if n >> k & 1 else "0" for k in range(n.bit_length() - 1, -1, -1)))''',
    r'''n = int(input())
print(bin(n).replace("0b", ""))''',
    r'''n = int(input())
out = []
for k in range(max(n.bit_length(), 1) - 1, -1, -1):
    out.append(str((n >> k) % 2))
print("".join(out))''',
], "10 correct")

# ---- 25 -----------------------------------------------------------------------------------------------
problem("inversions", """
The first line holds n (1 <= n <= 200), the second n distinct integers between 1 and 10^6. Print the number of
pairs of positions i < j with a[i] > a[j].
""", """
n = random.randint(1, 200)
print(n)
print(*[v[0] for v in Vector.random(n, [(1, 10**6)])])
""", [
    r'''n = int(input())
a = list(map(int, input().split()))
print(sum(a[i] > a[j] for i in range(n) for j in range(i + 1, n)))''',
    r'''def count(a):
    if len(a) <= 1:
        return a, 0
    m = len(a) // 2
    left, x = count(a[:m])
    right, y = count(a[m:])
    merged, inv, i, j = [], x + y, 0, 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            inv += len(left) - i
            j += 1
    return merged + left[i:] + right[j:], inv

input()
print(count(list(map(int, input().split())))[1])''',
    r'''import bisect
input()
seen, inv = [], 0
for x in map(int, input().split()):
    inv += len(seen) - bisect.bisect_right(seen, x)
    bisect.insort(seen, x)
print(inv)''',
    r'''n = int(input())
a = list(map(int, input().split()))
rank = {v: k + 1 for k, v in enumerate(sorted(a))}
tree = [0] * (n + 1)
inv = 0
for seen, x in enumerate(a):
    r = rank[x]
    s, k = 0, r
    while k:
        s += tree[k]
        k -= k & -k
    inv += seen - s
    k = r
    while k <= n:
        tree[k] += 1
        k += k & -k
print(inv)''',
    r'''n = int(input())
a = list(map(int, input().split()))
inv = 0
for i in range(n):
    for j in range(i):
        if a[j] > a[i]:
            inv += 1
print(inv)''',
    r'''from itertools import combinations
input()
print(sum(x > y for x, y in combinations(map(int, input().split()), 2)))''',
    r'''n = int(input())
a = list(map(int, input().split()))
swaps = 0
for i in range(n):
    for j in range(n - 1 - i):
        if a[j] > a[j + 1]:
            a[j], a[j + 1] = a[j + 1], a[j]
            swaps += 1
print(swaps)''',
    r'''import sys
data = list(map(int, sys.stdin.read().split()))
a = data[1:]
print(sum(1 for i, x in enumerate(a) for y in a[i + 1:] if x > y))''',
    r'''n = int(input())
a = list(map(int, input().split()))
order = sorted(range(n), key=lambda k: a[k])
inv = 0
for pos, k in enumerate(order):
    inv += sum(1 for other in order[pos + 1:] if other < k)
print(inv)''',
    r'''n = int(input())
a = list(map(int, input().split()))
print(sum(len([y for y in a[i + 1:] if y < a[i]]) for i in range(n)))''',
], "10 correct")

# ---- 26 -----------------------------------------------------------------------------------------------
problem("caesar", """
The first line holds a shift k (1 <= k <= 25), the second a lowercase word. Print the word with every letter
moved k places forward in the alphabet, wrapping from z back to a.
""", """
print(random.randint(1, 25))
print(String.random((0, 11)) + "z")  # every word has a z, which must wrap
""", [
    r'''k = int(input())
print("".join(chr((ord(c) - 97 + k) % 26 + 97) for c in input().strip()))''',
    r'''import string
k = int(input())
a = string.ascii_lowercase
print(input().strip().translate(str.maketrans(a, a[k:] + a[:k])))''',
    r'''k = int(input())
w = input().strip()
out = ""
for c in w:
    n = ord(c) + k
    if n > ord("z"):
        n -= 26
    out += chr(n)
print(out)''',
    r'''ALPHA = "abcdefghijklmnopqrstuvwxyz"
k = int(input())
print("".join(ALPHA[(ALPHA.index(c) + k) % 26] for c in input().strip()))''',
    r'''import sys
k, w = sys.stdin.read().split()
k = int(k)
print("".join(chr(97 + (ord(c) - 97 + k) % 26) for c in w))''',
    r'''def shift(c, k):
    return chr((ord(c) - ord("a") + k) % 26 + ord("a"))

k = int(input())
print("".join(shift(c, k) for c in input().strip()))''',
    r'''k = int(input())
table = {chr(97 + i): chr(97 + (i + k) % 26) for i in range(26)}
print("".join(table[c] for c in input().strip()))''',
    r'''from collections import deque
k = int(input())
d = deque("abcdefghijklmnopqrstuvwxyz")
d.rotate(-k)
m = dict(zip("abcdefghijklmnopqrstuvwxyz", d))
print("".join(map(m.get, input().strip())))''',
    r'''k = int(input())
w = input().strip()
print("".join(chr(ord(c) + k - 26 * (ord(c) + k > 122)) for c in w))''',
    r'''k = int(input())
print("".join(chr(ord(c) + k) for c in input().strip()))''',
], "9 correct; the last does not wrap past z (wrong on every input: each word has a z)")

# ---- 27 -----------------------------------------------------------------------------------------------
problem("lcm-ja", """
2つの整数 a, b（1 ≤ a, b ≤ 10^9）が1行で与えられます。a と b の最小公倍数を出力してください。
""", """
print(random.randint(1, 10**9), random.randint(1, 10**9))
""", [
    r'''import math
a, b = map(int, input().split())
print(a * b // math.gcd(a, b))''',
    r'''import math
print(math.lcm(*map(int, input().split())))''',
    r'''a, b = map(int, input().split())
x, y = a, b
while y:
    x, y = y, x % y
print(a // x * b)''',
    r'''def gcd(a, b):
    return a if b == 0 else gcd(b, a % b)

a, b = map(int, input().split())
print(a * b // gcd(a, b))''',
    r'''import sys
from math import gcd
a, b = map(int, sys.stdin.read().split())
print(abs(a * b) // gcd(a, b))''',
    r'''from fractions import Fraction
a, b = map(int, input().split())
print(Fraction(a, b).denominator * a)''',
    r'''import math
a, b = map(int, input().split())
g = math.gcd(a, b)
print((a // g) * (b // g) * g)''',
    r'''from functools import reduce
from math import gcd
print(reduce(lambda x, y: x * y // gcd(x, y), map(int, input().split())))''',
    r'''a, b = map(int, input().split())
m, n = max(a, b), min(a, b)
while m % n:
    m, n = n, m % n
print(a * b // n)''',
    r'''import math
x = [int(t) for t in input().split()]
print(x[0] * x[1] // math.gcd(x[0], x[1]))''',
], "10 correct", lang="ja")

# ---- 28 -----------------------------------------------------------------------------------------------
problem("sum-and-average-ja", """
1行目に n（1 ≤ n ≤ 100）、2行目に 0 以上 1000 以下の整数が n 個与えられます。合計と、平均の小数点以下を切り捨てた
値を、空白で区切って1行に出力してください。
""", """
n = random.randint(1, 100)
print(n)
print(*[random.randint(0, 1000) for _ in range(n)])
""", [
    r'''n = int(input())
a = list(map(int, input().split()))
print(sum(a), sum(a) // n)''',
    r'''n = int(input())
s = sum(map(int, input().split()))
print(f"{s} {s // n}")''',
    r'''import sys
d = list(map(int, sys.stdin.read().split()))
n, a = d[0], d[1:]
print(sum(a), sum(a) // n)''',
    r'''import math
n = int(input())
a = list(map(int, input().split()))
print(sum(a), math.floor(sum(a) / n))''',
    r'''n = int(input())
total = 0
for x in input().split():
    total += int(x)
print(total, total // n)''',
    r'''from statistics import mean
import math
n = int(input())
a = list(map(int, input().split()))
print(sum(a), math.floor(mean(a)))''',
    r'''n = int(input())
a = list(map(int, input().split()))
s = sum(a)
q, _ = divmod(s, n)
print(s, q)''',
    r'''n = int(input())
a = [int(x) for x in input().split()]
print(" ".join(map(str, (sum(a), sum(a) // len(a)))))''',
    r'''from functools import reduce
n = int(input())
s = reduce(int.__add__, map(int, input().split()))
print(s, s // n)''',
    r'''n = int(input())
a = list(map(int, input().split()))
print(sum(a), int(sum(a) / n))''',
], "10 correct", lang="ja")

# ---- 29 -----------------------------------------------------------------------------------------------
problem("unique-letters-ja", """
英小文字からなる単語が1つ与えられます。同じ文字が2回以上現れなければ YES、そうでなければ NO を出力してください。
""", """
print(String.random((1, 12)))
""", [
    r'''s = input().strip()
print("YES" if len(set(s)) == len(s) else "NO")''',
    r'''from collections import Counter
print("YES" if max(Counter(input().strip()).values()) == 1 else "NO")''',
    r'''s = input().strip()
seen = set()
ok = True
for c in s:
    if c in seen:
        ok = False
    seen.add(c)
print("YES" if ok else "NO")''',
    r'''s = sorted(input().strip())
print("NO" if any(s[k] == s[k + 1] for k in range(len(s) - 1)) else "YES")''',
    r'''s = input().strip()
print("YES" if all(s.count(c) == 1 for c in s) else "NO")''',
    r'''import sys
s = sys.stdin.readline().strip()
mask, ok = 0, True
for c in s:
    bit = 1 << (ord(c) - 97)
    if mask & bit:
        ok = False
    mask |= bit
print("YES" if ok else "NO")''',
    r'''s = input().strip()
print(["NO", "YES"][len(dict.fromkeys(s)) == len(s)])''',
    r'''s = input().strip()
print("YES" if not any(s[i] in s[i + 1:] for i in range(len(s))) else "NO")''',
    r'''import re
print("NO" if re.search(r"(.).*\1", input().strip()) else "YES")''',
    r'''s = input().strip()
counts = [0] * 26
for c in s:
    counts[ord(c) - 97] += 1
print("YES" if max(counts) <= 1 else "NO")''',
], "10 correct", lang="ja")

# ---- 30 -----------------------------------------------------------------------------------------------
problem("run-length", """
Read a word of the letters a, b and c. Print its run-length encoding: each run of equal letters as the letter
followed by the run's length (aaabcc -> a3b1c2).
""", """
print(String.random((1, 30), charset="abc"))
""", [
    r'''from itertools import groupby
print("".join(f"{k}{len(list(g))}" for k, g in groupby(input().strip())))''',
    r'''s = input().strip()
out, k = [], 0
while k < len(s):
    j = k
    while j < len(s) and s[j] == s[k]:
        j += 1
    out.append(s[k] + str(j - k))
    k = j
print("".join(out))''',
    r'''import re
print("".join(m.group(1) + str(len(m.group(0))) for m in re.finditer(r"(.)\1*", input().strip())))''',
    r'''s = input().strip()
res = ""
count = 1
for k in range(1, len(s) + 1):
    if k < len(s) and s[k] == s[k - 1]:
        count += 1
    else:
        res += s[k - 1] + str(count)
        count = 1
print(res)''',
    r'''import sys
s = sys.stdin.read().strip()
runs = []
for ch in s:
    if runs and runs[-1][0] == ch:
        runs[-1][1] += 1
    else:
        runs.append([ch, 1])
print("".join(c + str(n) for c, n in runs))''',
    r'''def rle(s):
    if not s:
        return ""
    n = len(s) - len(s.lstrip(s[0]))
    return s[0] + str(n) + rle(s[n:])

print(rle(input().strip()))''',
    r'''from itertools import groupby
s = input().strip()
print("".join(ch + str(sum(1 for _ in grp)) for ch, grp in groupby(s)))''',
    r'''s = input().strip() + "#"
prev, n, out = s[0], 0, []
for c in s:
    if c == prev:
        n += 1
    else:
        out.append(f"{prev}{n}")
        prev, n = c, 1
print("".join(out))''',
    r'''s = input().strip()
starts = [k for k in range(len(s)) if k == 0 or s[k] != s[k - 1]] + [len(s)]
print("".join(s[a] + str(b - a) for a, b in zip(starts, starts[1:])))''',
    r'''s = list(input().strip())
out = ""
while s:
    ch = s[0]
    n = 0
    while s and s[0] == ch:
        s.pop(0)
        n += 1
    out += ch + str(n)
print(out)''',
], "10 correct")


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        for row in PROBLEMS:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(PROBLEMS)} problems to {OUT}")


if __name__ == "__main__":
    main()
