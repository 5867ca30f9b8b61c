"""Mini stand-in for WebArena's reddit site (Postmill, container port 80).

Mirrors the markup that logins, expiry probes and evaluators touch: ``/login`` (labels "Username",
"Password", inputs ``#login-username``/``_username`` and ``#login-password``/``_password``, button
"Log in"), forums, submissions with comments and votes, ``/submit``, user pages with
``.user-bio__biography``, ``/user/<name>/edit_biography`` and ``/user/<name>/account`` ("Delete").

CLI (``python3 -m sites.postmill``): ``build`` (initdb + seed, image build time),
``start`` (container main), ``serve`` (the app alone). Header login as webarena-verified's image:
``X-Postmill-Auto-Login: username:password`` authenticates every request that carries it (401 when wrong). Data: database, role and password ``postmill``
(as upstream), data directory ``/usr/local/pgsql/data``.

Task start pages: the build also reads ``task_pages.json`` (the start pages of the WebArena and
VisualWebArena tasks that open on this site, written by ``scripts/task_pages.py``) and adds every forum
and every submission those URLs name, with the URL's forum name and submission id, and every
``/submission_images/<file>`` they name (served as a placeholder JPEG), so each task opens on a real page.
Listings take Postmill's sort routes (``/f/<forum>/{hot,new,active,top,controversial,most_commented}``)
and its keyset pagination (``?next[ranking]=…&next[id]=…``; 25 per page).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import struct
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode, urlparse

from flask import Response, abort, g, redirect, request

from miniweb import pgembed
from miniweb.core import SEED_EPOCH, Database, create_app, esc, login_required, page, serve

COOKIE = "PHPSESSID"  # Postmill is a Symfony (PHP) app
HEADER_LOGIN = "X-Postmill-Auto-Login"  # webarena-verified's header login (``username:password``)
CLUSTER = pgembed.Cluster(
    datadir=os.environ.get("MINIWEB_PGDATA", "/usr/local/pgsql/data"),
    db="postmill", user="postmill", password="postmill",
)
TABLES = ("users", "forums", "submissions", "comments", "submission_votes", "comment_votes", "images")
# Copied in by the Dockerfile (the file scripts/task_pages.py writes); POSTMILL_TASK_PAGES overrides.
TASK_PAGES = Path(os.environ.get("POSTMILL_TASK_PAGES", Path(__file__).with_name("postmill_task_pages.json")))
LOGIN_ERROR = "Invalid credentials."

SCHEMA = """
CREATE TABLE users (id SERIAL PRIMARY KEY, username TEXT UNIQUE NOT NULL, password TEXT NOT NULL,
  email TEXT, biography TEXT, created BIGINT NOT NULL);
CREATE TABLE forums (id SERIAL PRIMARY KEY, name TEXT UNIQUE NOT NULL, title TEXT NOT NULL,
  description TEXT NOT NULL, sidebar TEXT NOT NULL, created BIGINT NOT NULL);
CREATE TABLE submissions (id SERIAL PRIMARY KEY, forum_id INT NOT NULL REFERENCES forums(id),
  user_id INT NOT NULL REFERENCES users(id), title TEXT NOT NULL, url TEXT, body TEXT, created BIGINT NOT NULL);
CREATE TABLE comments (id SERIAL PRIMARY KEY, submission_id INT NOT NULL REFERENCES submissions(id),
  user_id INT NOT NULL REFERENCES users(id), parent_id INT REFERENCES comments(id), body TEXT NOT NULL,
  created BIGINT NOT NULL);
CREATE TABLE submission_votes (id SERIAL PRIMARY KEY, submission_id INT NOT NULL REFERENCES submissions(id),
  user_id INT NOT NULL REFERENCES users(id), upvote BOOLEAN NOT NULL, created BIGINT NOT NULL,
  UNIQUE (submission_id, user_id));
CREATE TABLE comment_votes (id SERIAL PRIMARY KEY, comment_id INT NOT NULL REFERENCES comments(id),
  user_id INT NOT NULL REFERENCES users(id), upvote BOOLEAN NOT NULL, created BIGINT NOT NULL,
  UNIQUE (comment_id, user_id));
CREATE TABLE images (id SERIAL PRIMARY KEY, file_name TEXT UNIQUE NOT NULL, created BIGINT NOT NULL);
"""

USERS = [  # (username, password, biography)
    ("MarvelsGrantMan136", "test1234", None),
    ("bookworm_jane", "janepass1", "Reader of everything. Indie bookstores forever."),
    ("pixel_pioneer", "pixelpass1", "Retro games and speedruns."),
    ("newshound42", "newspass1", None),
    ("CameronKelsey", "cameron123", "Home cook, occasional critic."),
]
FORUMS = [  # (name, title, description)
    ("books", "Books", "A forum for book lovers: reviews, recommendations and reading lists."),
    ("gaming", "Gaming", "Video games, board games and everything in between."),
    ("news", "News", "World and local news."),
    ("food", "Food", "Recipes, restaurants and food photos."),
    ("movies", "Movies", "Film news and discussion."),
    ("technology", "Technology", "Gadgets, software and the tech industry."),
]
SUBMISSIONS = [  # (forum, author, title, url, body)
    ("books", "bookworm_jane", "I re-read A Christmas Carol every December. What are your holiday classics?", None,
     "A Christmas Carol by Charles Dickens never gets old. Recommend me another one!"),
    ("books", "MarvelsGrantMan136", "Just finished The Hobbit for the first time", None,
     "Loved it. I recommend The Hobbit to anyone who thinks fantasy is not for them."),
    ("books", "bookworm_jane", "Support your local bookstores: buy online through bookshop.org",
     "https://bookshop.org/", "bookshop.org shares its profits with independent bookstores."),
    ("books", "newshound42", "What book are you reading this week?", None, "Weekly reading thread."),
    ("gaming", "pixel_pioneer", "Speedrunning the original Super Mario Bros in 2023", None,
     "The world record keeps dropping by milliseconds."),
    ("gaming", "MarvelsGrantMan136", "Best co-op games for two players?", None, "Looking for couch co-op ideas."),
    ("news", "newshound42", "City council approves new bike lanes downtown", "https://example.org/bike-lanes", None),
    ("news", "newshound42", "Library extends weekend opening hours", None, "Starting next month."),
    ("food", "CameronKelsey", "My grandmother's lasagna recipe", None, "Layer, bake, rest for 20 minutes."),
    ("food", "bookworm_jane", "Best pizza in Pittsburgh?", None, "Visiting next week, where should I go?"),
    ("movies", "pixel_pioneer", "Underrated sci-fi movies from the 90s", None, "Gattaca, Dark City, Contact..."),
    ("technology", "MarvelsGrantMan136", "Is it worth learning Rust in 2023?", None, "Coming from Python."),
]
COMMENTS = [  # (submission no., author, parent comment no. or None, body)
    (1, "MarvelsGrantMan136", None, "The Hobbit is my go-to winter read."),
    (1, "CameronKelsey", 1, "Same here, especially with hot cocoa."),
    (1, "newshound42", None, "Little Women, every year."),
    (2, "bookworm_jane", None, "Wait until you read The Lord of the Rings!"),
    (2, "pixel_pioneer", None, "The audiobook is great too."),
    (3, "MarvelsGrantMan136", None, "Didn't know about bookshop.org, thanks."),
    (4, "bookworm_jane", None, "Project Hail Mary. Can't put it down."),
    (5, "MarvelsGrantMan136", None, "The frame-perfect tricks are insane."),
    (6, "pixel_pioneer", None, "It Takes Two, no question."),
    (6, "CameronKelsey", 9, "Overcooked 2 if you want to test your friendship."),
    (7, "MarvelsGrantMan136", None, "About time."),
    (9, "bookworm_jane", None, "Saving this for Sunday."),
    (10, "CameronKelsey", None, "Pizza Siena on the south side."),
    (11, "MarvelsGrantMan136", None, "Dark City deserves more love."),
    (12, "pixel_pioneer", None, "Yes, the compiler teaches you a lot."),
]
SUBMISSION_VOTES = [  # (submission no., voter, upvote)
    (1, "MarvelsGrantMan136", True), (1, "CameronKelsey", True), (1, "newshound42", True),
    (2, "bookworm_jane", True), (2, "pixel_pioneer", True), (3, "MarvelsGrantMan136", True),
    (3, "newshound42", False), (4, "pixel_pioneer", True), (5, "MarvelsGrantMan136", True),
    (6, "pixel_pioneer", True), (7, "CameronKelsey", False), (9, "bookworm_jane", True),
    (10, "pixel_pioneer", True), (11, "bookworm_jane", True), (12, "newshound42", True),
]
COMMENT_VOTES = [  # (comment no., voter, upvote)
    (1, "bookworm_jane", True), (2, "MarvelsGrantMan136", True), (4, "MarvelsGrantMan136", True),
    (6, "bookworm_jane", True), (7, "CameronKelsey", False), (9, "MarvelsGrantMan136", True),
    (13, "bookworm_jane", True), (14, "pixel_pioneer", True),
]


# Authors of the submissions added for task start pages (not the benchmark's own account).
TASK_PAGE_AUTHORS = ("bookworm_jane", "pixel_pioneer", "newshound42", "CameronKelsey")


def task_page_items(path: Path = TASK_PAGES) -> tuple[list[str], list[tuple[int, str, str]], list[str]]:
    """What the task start pages name: (forums, [(submission id, forum, title)], image file names).

    Forum names keep the URL's case; a submission's title comes from its URL slug
    (``friendly-reminder-bookshop-org-exists`` -> "Friendly reminder bookshop org exists"), else
    "<forum> post <id>" (no task intent quotes a post title). Sorted, so the seed is deterministic.
    """
    forums: dict[str, str] = {}
    subs: dict[int, tuple[str, str]] = {}
    images: set[str] = set()
    for entry in json.loads(path.read_text()):
        parts = [unquote(p) for p in urlparse(entry["path"]).path.split("/")]
        if len(parts) >= 3 and parts[1] == "f" and parts[2]:
            forum = forums.setdefault(parts[2].lower(), parts[2])
            if len(parts) >= 4 and parts[3].isdigit():
                sid, slug = int(parts[3]), (parts[4] if len(parts) >= 5 else "")
                words = " ".join(w for w in re.split(r"[-_\s]+", slug) if w)
                title = words[:1].upper() + words[1:] if words else f"{forum} post {sid}"
                if sid in subs and (subs[sid][0].lower() != forum.lower() or (slug and subs[sid][1] != title)):
                    raise ValueError(f"{path}: submission {sid} named twice, differently: {entry['path']}")
                if sid not in subs or slug:
                    subs[sid] = (forum, title)
        elif len(parts) == 3 and parts[1] == "submission_images" and parts[2]:
            images.add(parts[2])
    return (sorted(forums.values(), key=lambda n: (n.lower(), n)),
            [(sid, f, t) for sid, (f, t) in sorted(subs.items())], sorted(images))


def placeholder_jpeg(width: int = 64, height: int = 48) -> bytes:
    """A valid baseline JPEG of flat mid-grey, built by hand (no imaging library in the image).

    One Huffman code ("0") for the DC difference 0 and one for end-of-block: two zero bits per 8x8 block.
    """
    def seg(marker: int, payload: bytes) -> bytes:
        return struct.pack(">HH", marker, len(payload) + 2) + payload

    one_code = bytes([1] + [0] * 15) + b"\x00"  # one code of length 1, for symbol 0
    blocks = ((width + 7) // 8) * ((height + 7) // 8)
    nbits = 2 * blocks
    data = bytes(nbits // 8) + (bytes([0xFF >> (nbits % 8)]) if nbits % 8 else b"")
    return (b"\xff\xd8" + seg(0xFFE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
            + seg(0xFFDB, b"\x00" + bytes([1] * 64))
            + seg(0xFFC0, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
            + seg(0xFFC4, b"\x00" + one_code) + seg(0xFFC4, b"\x10" + one_code)
            + seg(0xFFDA, b"\x01\x01\x00\x00\x3f\x00") + data + b"\xff\xd9")


PLACEHOLDER_JPEG = placeholder_jpeg()


def hash_password(username: str, password: str) -> str:
    # Deterministic salt so a rebuilt image has byte-identical rows (and fingerprint).
    salt = hashlib.sha256(f"postmill:{username}".encode()).hexdigest()[:16]
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), 20_000).hex()
    return f"pbkdf2_sha256$20000${salt}${digest}"


def check_password(stored: str, username: str, password: str) -> bool:
    try:
        _, iterations, salt, digest = stored.split("$")
    except ValueError:
        return False
    got = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), int(iterations)).hex()
    return hmac.compare_digest(got, digest)


def seed(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute(SCHEMA)
        uid = {}
        for i, (name, pw, bio) in enumerate(USERS, 1):
            cur.execute("INSERT INTO users (id, username, password, email, biography, created) "
                        "VALUES (%s, %s, %s, %s, %s, %s)",
                        (i, name, hash_password(name, pw), f"{name.lower()}@example.com", bio, SEED_EPOCH - 86400 * (60 - i)))
            uid[name] = i
        fid = {}
        for i, (name, title, desc) in enumerate(FORUMS, 1):
            cur.execute("INSERT INTO forums (id, name, title, description, sidebar, created) VALUES (%s,%s,%s,%s,%s,%s)",
                        (i, name, title, desc, f"Welcome to /f/{name}. Be nice.", SEED_EPOCH - 86400 * 50))
            fid[name] = i
        for i, (forum, author, title, url, body) in enumerate(SUBMISSIONS, 1):
            cur.execute("INSERT INTO submissions (id, forum_id, user_id, title, url, body, created) "
                        "VALUES (%s,%s,%s,%s,%s,%s,%s)",
                        (i, fid[forum], uid[author], title, url, body, SEED_EPOCH - 3600 * (40 - i)))
        for i, (sub, author, parent, body) in enumerate(COMMENTS, 1):
            cur.execute("INSERT INTO comments (id, submission_id, user_id, parent_id, body, created) "
                        "VALUES (%s,%s,%s,%s,%s,%s)", (i, sub, uid[author], parent, body, SEED_EPOCH - 600 * (40 - i)))
        for i, (sub, voter, up) in enumerate(SUBMISSION_VOTES, 1):
            cur.execute("INSERT INTO submission_votes (id, submission_id, user_id, upvote, created) "
                        "VALUES (%s,%s,%s,%s,%s)", (i, sub, uid[voter], up, SEED_EPOCH - 60 * i))
        for i, (com, voter, up) in enumerate(COMMENT_VOTES, 1):
            cur.execute("INSERT INTO comment_votes (id, comment_id, user_id, upvote, created) "
                        "VALUES (%s,%s,%s,%s,%s)", (i, com, uid[voter], up, SEED_EPOCH - 60 * i))
        # The task start pages' forums and submissions, with the ids their URLs name.
        page_forums, page_subs, page_images = task_page_items()
        for name in page_forums:
            if name.lower() not in {n.lower() for n in fid}:
                i = len(fid) + 1
                cur.execute("INSERT INTO forums (id, name, title, description, sidebar, created) VALUES (%s,%s,%s,%s,%s,%s)",
                            (i, name, name, f"The {name} forum.", f"Welcome to /f/{name}. Be nice.", SEED_EPOCH - 86400 * 50))
                fid[name] = i
        fid_ci = {n.lower(): i for n, i in fid.items()}
        for sid, forum, title in page_subs:
            if sid <= len(SUBMISSIONS):
                raise ValueError(f"task page submission id {sid} collides with the seed's own submissions")
            cur.execute("INSERT INTO submissions (id, forum_id, user_id, title, url, body, created) "
                        "VALUES (%s,%s,%s,%s,%s,%s,%s)",
                        (sid, fid_ci[forum.lower()], uid[TASK_PAGE_AUTHORS[sid % len(TASK_PAGE_AUTHORS)]], title, None,
                         f"{title}. Posted in /f/{forum}.", SEED_EPOCH - 86400 + sid // 10))
        for i, name in enumerate(page_images, 1):
            cur.execute("INSERT INTO images (id, file_name, created) VALUES (%s,%s,%s)", (i, name, SEED_EPOCH - 86400))
        for table in TABLES:  # explicit ids above: move each sequence past them (an empty table: next id 1)
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), coalesce((SELECT max(id) FROM {table}), 1), "
                        f"(SELECT count(*) > 0 FROM {table}))")


def slugify(title: str) -> str:
    """Postmill's URL slug: lower case, runs of other characters as one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60].strip("-") or "-"


# Postmill's listing sorts: (sort key column, its name in the ``next[...]`` cursor, direction). "hot" orders by
# Postmill's ranking, which in the WebArena data tracks the net score; here it is the net score. The time
# filter ``t`` (top, controversial, most_commented) is accepted and read as "all", so pages stay deterministic.
SORTS = {
    "hot": ("net", "ranking", "DESC"),
    "new": (None, None, "DESC"),
    "active": ("last_active", "lastActive", "DESC"),
    "top": ("net", "netScore", "DESC"),
    "controversial": ("net", "netScore", "ASC"),
    "most_commented": ("ncom", "commentCount", "DESC"),
}
SORT_NAMES = "any(" + ",".join(SORTS) + ")"
PER_PAGE = 25


def ago(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ts))


def make_app() -> Any:
    os.environ.setdefault("MINIWEB_DB", CLUSTER.url)
    app = create_app("postmill", cookie=COOKIE)
    db: Database = app.db  # type: ignore[attr-defined]
    sessions = app.sessions  # type: ignore[attr-defined]
    needs_login = login_required(lambda: "/login")

    @app.after_request
    def _log(resp: Response) -> Response:
        print(f'postmill: {request.remote_addr} "{request.method} {request.full_path.rstrip("?")}" {resp.status_code}',
              flush=True)
        return resp

    @app.before_request
    def header_login() -> Response | None:
        """webarena-verified's HeaderAutologinAuthenticator: every request carrying the header (but the
        firewall-free static paths) is authenticated by it, signed in or not; a bad value gets a 401."""
        if HEADER_LOGIN not in request.headers or re.match(r"^/(_(profiler|wdt)|css|images|js)/", request.path):
            return None
        parts = request.headers[HEADER_LOGIN].split(":", 1)
        if len(parts) != 2:
            why = f"Invalid format in {HEADER_LOGIN} header. Expected username:password"
        elif not parts[0] or not parts[1]:
            why = f"No {'username' if not parts[0] else 'password'} provided in {HEADER_LOGIN} header"
        else:
            row = db.one("SELECT username, password FROM users WHERE lower(username) = lower(%s)", (parts[0],))
            if row and check_password(row[1], row[0], parts[1]):
                g.user = row[0]
                return None
            # Symfony's messages (an unknown user is hidden behind "Bad credentials.", hide_user_not_found)
            why = "The presented password is invalid." if row else "Bad credentials."
        return Response(f"Authentication failed: {why}", status=401, mimetype="text/plain")

    def user_id() -> int | None:
        row = db.one("SELECT id FROM users WHERE username = %s", (g.user,)) if g.user else None
        return row[0] if row else None

    def nav() -> str:
        links = ['<a href="/" class="site-nav__link">Postmill</a>', '<a href="/forums" class="site-nav__link">Forums</a>',
                 '<a href="/all" class="site-nav__link">All</a>']
        if g.user:
            u = esc(g.user)
            links += ['<a href="/submit" class="site-nav__link">Submit</a>',
                      f'<a href="/user/{u}" class="site-nav__link">{u}</a>',
                      f'<a href="/user/{u}/account" class="site-nav__link">Account</a>',
                      '<a href="/logout" class="site-nav__link">Log out</a>']
        else:
            links += ['<a href="/login" class="site-nav__link">Log in</a>',
                      '<a href="/registration" class="site-nav__link">Sign up</a>']
        return f'<nav class="site-nav">{" ".join(links)}</nav>'

    def render(title: str, body: str, status: int = 200) -> Response:
        return Response(page(title, body, nav=nav()), status=status, mimetype="text/html")

    def score_sql(kind: str) -> str:
        table, col = ("submission_votes", "submission_id") if kind == "s" else ("comment_votes", "comment_id")
        return (f"(SELECT coalesce(sum(CASE WHEN v.upvote THEN 1 ELSE -1 END), 0) FROM {table} v "
                f"WHERE v.{col} = x.id)")

    def vote_form(kind: str, item_id: int, score: int) -> str:
        return (f'<form action="/{kind}v/{item_id}" method="post" class="vote">'
                f'<button class="vote__button vote__up" name="choice" value="1" title="Upvote">Upvote</button>'
                f'<span class="vote__net-score">{score}</span>'
                f'<button class="vote__button vote__down" name="choice" value="-1" title="Downvote">Downvote</button>'
                "</form>")

    def submission_rows(where: str = "", args: tuple = (), sort: str = "hot", paginate: bool = True) -> str:
        key, cursor_name, direction = SORTS[sort]
        cond, cargs = [], []
        try:
            next_id = int(request.args["next[id]"]) if paginate and "next[id]" in request.args else None
            next_key = int(request.args[f"next[{cursor_name}]"]) if next_id is not None and key else None
        except (KeyError, ValueError):
            next_id = next_key = None
        if next_id is not None:
            if key and next_key is not None:
                cmp = "<" if direction == "DESC" else ">"
                cond.append(f"(s.{key} {cmp} %s OR (s.{key} = %s AND s.id <= %s))")
                cargs += [next_key, next_key, next_id]
            else:
                cond.append("s.id <= %s")
                cargs.append(next_id)
        order = (f"s.{key} {direction}, " if key else "") + "s.id DESC"
        rows = db.all(
            f"SELECT * FROM (SELECT x.id, f.name, x.title, x.url, u.username, x.created, {score_sql('s')} AS net, "
            "(SELECT count(*) FROM comments c WHERE c.submission_id = x.id) AS ncom, "
            "greatest(x.created, (SELECT max(c.created) FROM comments c WHERE c.submission_id = x.id)) AS last_active "
            f"FROM submissions x JOIN forums f ON f.id = x.forum_id JOIN users u ON u.id = x.user_id {where}) s "
            f"{'WHERE ' + ' AND '.join(cond) if cond else ''} ORDER BY {order} LIMIT %s",
            tuple(args) + tuple(cargs) + ((PER_PAGE + 1,) if paginate else (1_000_000,)))
        more = ""
        if paginate and len(rows) > PER_PAGE:
            nxt = rows[PER_PAGE]
            params = [(k, v) for k, v in request.args.items(multi=True) if not k.startswith("next[")]
            if key:
                params.append((f"next[{cursor_name}]", str(nxt[{"net": 6, "ncom": 7, "last_active": 8}[key]])))
            params.append(("next[id]", str(nxt[0])))
            more = f'<nav class="pagination"><a href="{esc(request.path)}?{esc(urlencode(params))}" rel="next">More</a></nav>'
            rows = rows[:PER_PAGE]
        out = []
        for sid, forum, title, url, author, created, score, ncom, _ in rows:
            href = f"/f/{esc(forum)}/{sid}/{slugify(title)}"
            out.append(
                f'<article class="submission" id="submission_{sid}">{vote_form("s", sid, score)}'
                f'<h1 class="submission__title"><a class="submission__link" href="{esc(url) if url else href}">{esc(title)}</a></h1>'
                f'<p class="submission__info">Submitted by <a href="/user/{esc(author)}">{esc(author)}</a> '
                f'<time datetime="{ago(created)}">{ago(created)}</time> in <a href="/f/{esc(forum)}">{esc(forum)}</a></p>'
                f'<nav class="submission__nav"><a href="{href}">{ncom} comments</a></nav></article>')
        return ("".join(out) or "<p>There doesn't seem to be anything here.</p>") + more

    def sort_nav(base: str, current: str) -> str:
        labels = {"hot": "Hot", "new": "New", "active": "Active", "top": "Top", "controversial": "Controversial",
                  "most_commented": "Most commented"}
        return '<nav class="submission-sort">' + " ".join(
            f'<a href="{esc(base)}/{k}" class="tab{" tab--active" if k == current else ""}">{v}</a>'
            for k, v in labels.items()) + "</nav>"

    @app.get("/")
    @app.get("/all")
    @app.get(f"/<{SORT_NAMES}:sort>")
    @app.get(f"/all/<{SORT_NAMES}:sort>")
    def front(sort: str = "hot") -> Response:
        return render("Postmill", f"<h1>All forums</h1>{sort_nav('/all', sort)}{submission_rows(sort=sort)}")

    @app.get("/forums")
    @app.get("/forums/all")
    @app.get("/forums/by_name")
    def forums() -> Response:
        rows = db.all("SELECT f.name, f.title, f.description, (SELECT count(*) FROM submissions s WHERE s.forum_id = f.id)"
                      " FROM forums f ORDER BY f.name")
        items = "".join(f'<li><a href="/f/{esc(n)}" class="forum-list__link">{esc(n)}</a> <span>{esc(t)}</span> '
                        f'<span class="forum-list__description">{esc(d)}</span> <span>{c} submissions</span></li>'
                        for n, t, d, c in rows)
        return render("List of forums", f'<h1 class="page-heading">List of forums</h1><ul class="forum-list">{items}</ul>')

    def forum_or_404(name: str) -> tuple:
        row = db.one("SELECT id, name, title, description, sidebar FROM forums WHERE lower(name) = lower(%s)", (name,))
        if not row:
            abort(404)
        return row

    @app.get("/f/<forum>")
    @app.get(f"/f/<forum>/<{SORT_NAMES}:sort>")
    def forum_page(forum: str, sort: str = "hot") -> Response:
        fid, name, title, desc, sidebar = forum_or_404(forum)
        side = f'<aside class="sidebar"><h1>{esc(title)}</h1><p>{esc(desc)}</p><p>{esc(sidebar)}</p></aside>'
        return render(f"/f/{name}", f'<h1 class="forum-title"><a href="/f/{esc(name)}">/f/{esc(name)}</a></h1>'
                      f'{sort_nav(f"/f/{name}", sort)}{side}'
                      f'{submission_rows("WHERE x.forum_id = %s", (fid,), sort=sort)}')

    def comment_tree(sub_id: int) -> str:
        rows = db.all(f"SELECT x.id, x.parent_id, u.username, x.body, x.created, {score_sql('c')} FROM comments x "
                      "JOIN users u ON u.id = x.user_id WHERE x.submission_id = %s ORDER BY x.id", (sub_id,))
        children: dict[int | None, list[tuple]] = {}
        for r in rows:
            children.setdefault(r[1], []).append(r)

        def render_level(parent: int | None) -> str:
            return "".join(
                f'<article class="comment" id="comment_{cid}"><p class="comment__info">'
                f'<a href="/user/{esc(author)}">{esc(author)}</a> <time datetime="{ago(created)}">{ago(created)}</time></p>'
                f'<div class="comment__body">{esc(body)}</div>{vote_form("c", cid, score)}'
                f'<div class="comment__replies">{render_level(cid)}</div></article>'
                for cid, _, author, body, created, score in children.get(parent, []))

        return render_level(None)

    @app.get("/f/<forum>/<int:sid>")
    @app.get("/f/<forum>/<int:sid>/")
    @app.get("/f/<forum>/<int:sid>/<slug>")
    @app.get("/f/<forum>/<int:sid>/-/comment/<int:cid>")
    def submission_page(forum: str, sid: int, slug: str = "", cid: int = 0) -> Response:
        fid, fname, *_ = forum_or_404(forum)
        row = db.one(f"SELECT x.id, x.title, x.url, x.body, u.username, x.created, {score_sql('s')} FROM submissions x "
                     "JOIN users u ON u.id = x.user_id WHERE x.id = %s AND x.forum_id = %s", (sid, fid))
        if not row:
            abort(404)
        _, title, url, body, author, created, score = row
        link = f'<a class="submission__link" href="{esc(url)}">{esc(title)}</a>' if url else esc(title)
        form = ""
        if g.user:
            form = (f'<form action="/f/{esc(fname)}/{sid}/-/comment" method="post" class="comment-form">'
                    f'<label for="reply_to_submission_{sid}_comment">Comment</label>'
                    f'<textarea id="reply_to_submission_{sid}_comment" name="reply_to_submission_{sid}[comment]" required></textarea>'
                    '<button type="submit" class="button">Post</button></form>')
        body_html = (f'<article class="submission submission--full" id="submission_{sid}">{vote_form("s", sid, score)}'
                     f'<h1 class="submission__title">{link}</h1>'
                     f'<p class="submission__info">Submitted by <a href="/user/{esc(author)}">{esc(author)}</a> '
                     f'<time datetime="{ago(created)}">{ago(created)}</time> in '
                     f'<a href="/f/{esc(fname)}">{esc(fname)}</a></p>'
                     f'<div class="submission__body">{esc(body or "")}</div></article>'
                     f'{form}<section class="comments">{comment_tree(sid)}</section>')
        return render(title, body_html)

    @app.post("/f/<forum>/<int:sid>/-/comment")
    @needs_login
    def post_comment(forum: str, sid: int) -> Response:
        fid, fname, *_ = forum_or_404(forum)
        text = (request.form.get(f"reply_to_submission_{sid}[comment]") or request.form.get("comment") or "").strip()
        if not db.one("SELECT id FROM submissions WHERE id = %s AND forum_id = %s", (sid, fid)):
            abort(404)
        if not text:
            return redirect(f"/f/{fname}/{sid}")
        row = db.one("INSERT INTO comments (submission_id, user_id, body, created) VALUES (%s,%s,%s,%s) RETURNING id",
                     (sid, user_id(), text, int(time.time())))
        return redirect(f"/f/{fname}/{sid}/-/comment/{row[0]}")

    def vote(table: str, col: str, parent: str, item_id: int) -> Response:
        if not db.one(f"SELECT id FROM {parent} WHERE id = %s", (item_id,)):
            abort(404)
        choice = request.form.get("choice", "0")
        uid = user_id()
        db.run(f"DELETE FROM {table} WHERE {col} = %s AND user_id = %s", (item_id, uid))
        if choice in ("1", "-1"):
            db.run(f"INSERT INTO {table} ({col}, user_id, upvote, created) VALUES (%s,%s,%s,%s)",
                   (item_id, uid, choice == "1", int(time.time())))
        return redirect(request.referrer or "/")

    @app.post("/sv/<int:sid>")
    @needs_login
    def vote_submission(sid: int) -> Response:
        return vote("submission_votes", "submission_id", "submissions", sid)

    @app.post("/cv/<int:cid>")
    @needs_login
    def vote_comment(cid: int) -> Response:
        return vote("comment_votes", "comment_id", "comments", cid)

    @app.route("/submit", methods=["GET", "POST"])
    @app.route("/submit/<forum>", methods=["GET", "POST"])
    @needs_login
    def submit(forum: str = "") -> Response:
        error = ""
        if request.method == "POST":
            f = request.form
            title, url, body = (f.get("submission[title]", "").strip(), f.get("submission[url]", "").strip(),
                                f.get("submission[body]", "").strip())
            frow = db.one("SELECT id, name FROM forums WHERE id::text = %s OR lower(name) = lower(%s)",
                          (f.get("submission[forum]", ""), f.get("submission[forum]", "")))
            if not title:
                error = "This value should not be blank."
            elif not frow:
                error = "Please choose a forum."
            else:
                sid = db.one("INSERT INTO submissions (forum_id, user_id, title, url, body, created) "
                             "VALUES (%s,%s,%s,%s,%s,%s) RETURNING id",
                             (frow[0], user_id(), title, url or None, body or None, int(time.time())))[0]
                return redirect(f"/f/{frow[1]}/{sid}/{slugify(title)}")
        options = "".join(f'<option value="{fid}"{" selected" if n.lower() == forum.lower() else ""}>{esc(n)}</option>'
                          for fid, n in db.all("SELECT id, name FROM forums ORDER BY name"))
        err = f'<ul class="form-error-list"><li>{esc(error)}</li></ul>' if error else ""
        form = (f'<h1 class="page-heading">Create submission</h1>{err}<form method="post" action="/submit" class="form">'
                '<div class="form__row"><label for="submission_url">URL</label>'
                '<input type="url" id="submission_url" name="submission[url]"></div>'
                '<div class="form__row"><label for="submission_title" class="required">Title</label>'
                '<textarea id="submission_title" name="submission[title]" required></textarea></div>'
                '<div class="form__row"><label for="submission_body">Body</label>'
                '<textarea id="submission_body" name="submission[body]"></textarea></div>'
                '<div class="form__row"><label for="submission_forum" class="required">Forum</label>'
                f'<select id="submission_forum" name="submission[forum]">{options}</select></div>'
                '<div class="form__row form__button-row"><button type="submit" id="submission_submit" class="button">'
                'Create submission</button></div></form>')
        return render("Create submission", form, 400 if error else 200)

    @app.get("/login")
    def login() -> Response:
        if g.user:
            return redirect("/")
        failed = request.cookies.get("postmill_login_error") == "1"
        err = f'<div class="alert alert--bad" role="alert"><p>{LOGIN_ERROR}</p></div>' if failed else ""
        last = esc(request.cookies.get("postmill_last_username", "")) if failed else ""
        form = (f'<h1 class="page-heading">Log in</h1>{err}<form action="/login_check" method="post" class="form">'
                '<div class="form__row"><label for="login-username" class="form__label">Username</label>'
                f'<input type="text" id="login-username" name="_username" value="{last}" required autofocus class="form-control"></div>'
                '<div class="form__row"><label for="login-password" class="form__label">Password</label>'
                '<input type="password" id="login-password" name="_password" required class="form-control"></div>'
                '<div class="form__row"><input type="checkbox" id="remember-me" name="_remember_me">'
                '<label for="remember-me">Remember me</label></div>'
                '<div class="form__row form__button-row"><button type="submit" class="button">Log in</button></div>'
                '</form><p><a href="/reset_password">Forgot password?</a></p>')
        resp = render("Log in", form)
        resp.delete_cookie("postmill_login_error")
        resp.delete_cookie("postmill_last_username")
        return resp

    @app.post("/login_check")
    def login_check() -> Response:
        username, password = request.form.get("_username", ""), request.form.get("_password", "")
        row = db.one("SELECT username, password FROM users WHERE lower(username) = lower(%s)", (username,))
        if row and check_password(row[1], row[0], password):
            return sessions.start(redirect("/"), row[0])
        resp = redirect("/login")
        resp.set_cookie("postmill_login_error", "1", httponly=True, samesite="Lax")
        resp.set_cookie("postmill_last_username", username[:100], httponly=True, samesite="Lax")
        return resp

    @app.route("/logout", methods=["GET", "POST"])
    def logout() -> Response:
        return sessions.end(redirect("/"))

    @app.get("/submission_images/<name>")
    def submission_image(name: str) -> Response:
        if not db.one("SELECT id FROM images WHERE file_name = %s", (name,)):
            abort(404)
        return Response(PLACEHOLDER_JPEG, mimetype="image/jpeg", headers={"Cache-Control": "public, max-age=86400"})

    def user_or_404(name: str) -> tuple:
        row = db.one("SELECT id, username, biography, created, email FROM users WHERE lower(username) = lower(%s)", (name,))
        if not row:
            abort(404)
        return row

    @app.get("/user/<name>")
    def user_page(name: str) -> Response:
        uid, uname, bio, created, _ = user_or_404(name)
        bio_html = (f'<div class="user-bio__biography">{esc(bio)}</div>' if bio else "")
        edit = (f'<p><a href="/user/{esc(uname)}/edit_biography">Edit biography</a></p>' if g.user == uname else "")
        subs = submission_rows("WHERE x.user_id = %s", (uid,), sort="new", paginate=False)
        coms = "".join(f'<article class="comment"><div class="comment__body">{esc(b)}</div>'
                       f'<a href="/f/{esc(f)}/{s}/-/comment/{c}">permalink</a></article>'
                       for c, s, f, b in db.all("SELECT c.id, c.submission_id, f.name, c.body FROM comments c "
                                                "JOIN submissions s ON s.id = c.submission_id JOIN forums f ON f.id = s.forum_id "
                                                "WHERE c.user_id = %s ORDER BY c.id DESC", (uid,)))
        body = (f'<section class="user-bio"><h1 class="user-bio__username">{esc(uname)}</h1>{bio_html}'
                f'<p>Registered <time datetime="{ago(created)}">{ago(created)}</time></p>{edit}</section>'
                f'<h2>Submissions</h2>{subs}<h2>Comments</h2>{coms}')
        return render(uname, body)

    def own_account(name: str) -> tuple:
        row = user_or_404(name)
        if row[1] != g.user:
            abort(403)
        return row

    @app.route("/user/<name>/edit_biography", methods=["GET", "POST"])
    @needs_login
    def edit_biography(name: str) -> Response:
        uid, uname, bio, *_ = own_account(name)
        if request.method == "POST":
            text = request.form.get("user_biography[biography]", request.form.get("biography", "")).strip()
            db.run("UPDATE users SET biography = %s WHERE id = %s", (text or None, uid))
            return redirect(f"/user/{uname}")
        form = (f'<h1 class="page-heading">Edit biography</h1><form method="post" class="form">'
                '<div class="form__row"><label for="user_biography_biography">Biography</label>'
                f'<textarea id="user_biography_biography" name="user_biography[biography]">{esc(bio or "")}</textarea></div>'
                '<div class="form__row form__button-row"><button type="submit" class="button">Save</button></div></form>')
        return render("Edit biography", form)

    @app.route("/user/<name>/account", methods=["GET", "POST"])
    @needs_login
    def account(name: str) -> Response:
        uid, uname, _, _, email = own_account(name)
        if request.method == "POST":
            new_email = request.form.get("user[email]", "").strip()
            db.run("UPDATE users SET email = %s WHERE id = %s", (new_email or None, uid))
            return redirect(f"/user/{uname}/account")
        form = (f'<h1 class="page-heading">Account settings</h1><form method="post" class="form">'
                '<div class="form__row"><label for="user_username">Username</label>'
                f'<input type="text" id="user_username" name="user[username]" value="{esc(uname)}" readonly></div>'
                '<div class="form__row"><label for="user_email">Email</label>'
                f'<input type="email" id="user_email" name="user[email]" value="{esc(email or "")}"></div>'
                '<div class="form__row form__button-row"><button type="submit" class="button">Save</button></div></form>'
                f'<h2>Delete account</h2><p><a href="/user/{esc(uname)}/delete_account" class="button button--danger">'
                'Delete account</a></p>')
        return render("Account settings", form)

    @app.errorhandler(403)
    def forbidden(_: Any) -> Response:
        return render("Access denied", "<h1>Access denied</h1><p>You are not allowed to do this.</p>", 403)

    @app.errorhandler(404)
    def not_found(_: Any) -> Response:
        return render("Page not found", "<h1>Page not found</h1><p>The page you requested does not exist.</p>", 404)

    @app.errorhandler(500)
    def server_error(_: Any) -> Response:
        return render("Internal server error", "<h1>Internal server error</h1><p>Something went wrong.</p>", 500)

    return app


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "start"
    if cmd == "build":
        pgembed.build(CLUSTER, seed)
    elif cmd == "start":
        return pgembed.run(CLUSTER, "postmill", [sys.executable, "-m", "sites.postmill", "serve"])
    elif cmd == "serve":
        serve(make_app(), int(os.environ.get("MINIWEB_PORT", "80")))
    else:
        print(f"usage: python3 -m sites.postmill [build|start|serve], not {cmd!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
