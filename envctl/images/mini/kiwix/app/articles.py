"""The articles of the mini Wikipedia: a landing page and a handful of linked articles.

Paths are ZIM article paths (kiwix-serve 3.3.0 serves them at ``/<book>/A/<path>``). Bodies are
HTML fragments; ``[[Target|label]]`` marks an internal link, turned into a relative href by
build_zim.py so links work whatever the article's depth.
"""
from __future__ import annotations

LANDING = "User:The_other_Kiwix_guy/Landing"

ARTICLES: dict[str, tuple[str, str]] = {
    LANDING: (
        "Welcome to Wikipedia",
        """
<p>Welcome to <b>Wikipedia</b>, the free encyclopedia that anyone can edit. This offline copy is
served by Kiwix.</p>
<h2>Popular articles</h2>
<ul>
<li>[[Pittsburgh]]</li>
<li>[[Carnegie_Mellon_University|Carnegie Mellon University]]</li>
<li>[[New_York_City|New York City]]</li>
<li>[[Fred_Rogers|Fred Rogers]]</li>
<li>[[Mister_Rogers'_Neighborhood|Mister Rogers' Neighborhood]]</li>
<li>[[Mackinac_Bridge|Mackinac Bridge]]</li>
<li>[[Massachusetts_Institute_of_Technology|Massachusetts Institute of Technology]]</li>
<li>[[Allegheny_County,_Pennsylvania|Allegheny County]]</li>
</ul>
""",
    ),
    "Pittsburgh": (
        "Pittsburgh",
        """
<p><b>Pittsburgh</b> is a city in the Commonwealth of Pennsylvania, United States, and the county
seat of [[Allegheny_County,_Pennsylvania|Allegheny County]]. It is located in southwest Pennsylvania
at the confluence of the Allegheny River and the Monongahela River, which combine to form the Ohio
River.</p>
<p>Pittsburgh is known as "the Steel City" for its more than 300 steel-related businesses, and as the
"City of Bridges" for its 446 bridges. The city is home to universities such as
[[Carnegie_Mellon_University|Carnegie Mellon University]] and the University of Pittsburgh.</p>
<p>The television program [[Mister_Rogers'_Neighborhood|Mister Rogers' Neighborhood]], hosted by
[[Fred_Rogers|Fred Rogers]], was produced at the public television station WQED in Pittsburgh.</p>
""",
    ),
    "Carnegie_Mellon_University": (
        "Carnegie Mellon University",
        """
<p><b>Carnegie Mellon University</b> (<b>CMU</b>) is a private research university in
[[Pittsburgh]], Pennsylvania. The institution was established in 1900 by Andrew Carnegie as the
Carnegie Technical Schools. In 1967 it merged with the Mellon Institute of Industrial Research to
form Carnegie Mellon University.</p>
<p>The university's main campus is in the Oakland neighborhood, about three miles from downtown
Pittsburgh. It is known for its School of Computer Science, one of the first computer science
departments in the United States.</p>
""",
    ),
    "New_York_City": (
        "New York City",
        """
<p><b>New York City</b> is the most populous city in the United States. It is located at the
southern tip of New York State on one of the world's largest natural harbors. The city comprises
five boroughs: Brooklyn, Queens, Manhattan, the Bronx and Staten Island.</p>
<p>New York City is about 370 miles east of [[Pittsburgh]]. Columbia University, in the
Morningside Heights neighborhood of Manhattan, is one of its universities.</p>
""",
    ),
    "Fred_Rogers": (
        "Fred Rogers",
        """
<p><b>Fred McFeely Rogers</b> (March 20, 1928 &ndash; February 27, 2003), better known as
<b>Mister Rogers</b>, was an American television host, author and Presbyterian minister. He was the
creator, showrunner and host of the preschool television series
[[Mister_Rogers'_Neighborhood|Mister Rogers' Neighborhood]], which ran from 1968 to 2001.</p>
<p>Rogers was born in Latrobe, Pennsylvania, and the series was filmed at WQED in
[[Pittsburgh]].</p>
""",
    ),
    "Mister_Rogers'_Neighborhood": (
        "Mister Rogers' Neighborhood",
        """
<p><b>Mister Rogers' Neighborhood</b> is an American half-hour educational children's television
series created and hosted by [[Fred_Rogers|Fred Rogers]]. The series was produced by the public
broadcaster WQED in [[Pittsburgh]], Pennsylvania, where it was filmed.</p>
""",
    ),
    "Mackinac_Bridge": (
        "Mackinac Bridge",
        """
<p>The <b>Mackinac Bridge</b> is a suspension bridge spanning the Straits of Mackinac, connecting
the Upper and Lower peninsulas of the U.S. state of Michigan. Opened in 1957, the bridge is
26,372 feet long and is one of the longest suspension bridges in the world.</p>
""",
    ),
    "Massachusetts_Institute_of_Technology": (
        "Massachusetts Institute of Technology",
        """
<p>The <b>Massachusetts Institute of Technology</b> (<b>MIT</b>) is a private land-grant research
university in Cambridge, Massachusetts. Established in 1861, MIT has played a significant role in the
development of modern technology and science. Like [[Carnegie_Mellon_University|Carnegie Mellon
University]], it is known for computer science and engineering.</p>
""",
    ),
    "Allegheny_County,_Pennsylvania": (
        "Allegheny County, Pennsylvania",
        """
<p><b>Allegheny County</b> is a county in the southwestern part of the Commonwealth of
Pennsylvania. Its county seat is [[Pittsburgh]]. The Pittsburgh International Airport is operated
by the Allegheny County Airport Authority.</p>
""",
    ),
}

# path -> (title, target path); titles differ from paths so libzim 8.1.1 indexes them (build_zim.py).
REDIRECTS: dict[str, tuple[str, str]] = {
    "Pittsburgh,_Pennsylvania": ("Pittsburgh, Pennsylvania", "Pittsburgh"),
    "Mister_Rogers": ("Mister Rogers", "Fred_Rogers"),
    "CMU_(university)": ("CMU (university)", "Carnegie_Mellon_University"),
}

# Bodies of the start pages of the WebArena / VisualWebArena tasks (files/task_pages.json) that are
# not among ARTICLES above. build_zim.py adds an article for every A/ path of that list not yet in the
# ZIM, titled after its path ("Up_(2009_film)" -> "Up (2009 film)"); a path missing here gets a short
# generic body. TASK_IMAGES lists each article's pictures in page order: (I/ file name, caption); the
# pictures themselves are drawn by build_zim.py. Wagyu's second picture is the thin-sliced beef that
# visualwebarena/728 asks to order.
TASK_BODIES: dict[str, str] = {
    "Up_(2009_film)": """
<p><b>Up</b> is a 2009 American computer-animated comedy-drama adventure film produced by Pixar
Animation Studios for Walt Disney Pictures. It was directed by Pete Docter and co-directed by Bob
Peterson.</p>
<p>The film follows Carl Fredricksen, an elderly widower who ties thousands of balloons to his house
and flies it to South America, and Russell, a young Wilderness Explorer who is accidentally carried
along. On the way they meet Dug, a friendly talking golden retriever, and Kevin, a giant flightless
bird hunted by the explorer Charles Muntz.</p>
""",
    "Digging": """
<p><b>Digging</b>, also referred to as <b>excavation</b>, is the process of using some implement
such as claws, hands, manual tools or heavy equipment to remove material from a solid surface,
usually soil, sand or rock on the surface of Earth.</p>
<p>Many animals dig: dogs dig holes to bury bones or to cool off, and burrowing animals such as moles
and rabbits dig tunnels to live in. People dig with shovels and spades to plant gardens, lay
foundations and search for buried objects.</p>
""",
    "Pokémon": """
<p><b>Pokémon</b> (an abbreviation of <i>Pocket Monsters</i> in Japan) is a Japanese media franchise
managed by The Pokémon Company, founded by Nintendo, Game Freak and Creatures. The franchise was
created by Satoshi Tajiri in 1996 and is centered on fictional creatures called Pokémon, which humans,
known as Pokémon Trainers, catch and train to battle each other.</p>
<p>The franchise began as a pair of role-playing video games for the Game Boy and has grown to include
a trading card game, an animated television series, films, toys and plush figures. Its mascot is
Pikachu, a yellow electric-type Pokémon.</p>
""",
    "Rudolph_the_Red-Nosed_Reindeer:_The_Movie": """
<p><b>Rudolph the Red-Nosed Reindeer: The Movie</b> is a 1998 American animated musical Christmas film
directed by Bill Kowalchuk. It is based on the 1939 story and the 1949 song about Rudolph, a young
reindeer with a glowing red nose.</p>
<p>Teased for his nose, Rudolph runs away from Santa's village at the North Pole, befriends Slyly the
arctic fox and Leonard the polar bear, and returns on a foggy Christmas Eve to guide Santa Claus's
sleigh with the light of his nose.</p>
""",
    "Yoda": """
<p><b>Yoda</b> is a fictional character in the <i>Star Wars</i> franchise created by George Lucas,
first appearing in the 1980 film <i>The Empire Strikes Back</i>. He is a small, green humanoid alien
who is powerful with the Force and serves as a Grand Master of the Jedi Order.</p>
<p>Yoda trained Jedi for 800 years, among them Luke Skywalker on the swamp planet Dagobah. He is known
for his wisdom and his unusual syntax, as in "Do. Or do not. There is no try."</p>
""",
    "Wagyu": """
<p><b>Wagyu</b> (和牛, "Japanese cattle") is any of the four Japanese breeds of beef cattle, the
Japanese Black, Japanese Brown, Japanese Polled and Japanese Shorthorn. Wagyu cattle are known for
meat with intense marbling, the fine streaks of intramuscular fat that make it tender and rich in
flavor.</p>
<h2>Cuisine</h2>
<p>Wagyu beef is often cut into very thin slices for dishes such as sukiyaki, shabu-shabu and
yakiniku, or served as steak. Well-known regional brands include Kobe, Matsusaka and Ōmi beef.</p>
""",
}

TASK_IMAGES: dict[str, list[tuple[str, str]]] = {
    "Up_(2009_film)": [("Up_house_balloons.png.webp", "Carl's house lifted by balloons")],
    "Digging": [("Dog_digging.jpg.webp", "A dog digging a hole")],
    "Pokémon": [("Poke_Ball.svg.png.webp", "A Poké Ball, used to catch Pokémon")],
    "Rudolph_the_Red-Nosed_Reindeer:_The_Movie": [("Rudolph_red_nose.png.webp", "Rudolph and his glowing red nose")],
    "Yoda": [("Yoda_figure.png.webp", "Yoda, Grand Master of the Jedi Order")],
    "Wagyu": [
        ("Japanese_Black_cattle.jpg.webp", "Japanese Black cattle, the most common Wagyu breed"),
        ("Wagyu_beef_thin_slices.jpg.webp", "Thinly sliced, heavily marbled Wagyu beef"),
    ],
}
