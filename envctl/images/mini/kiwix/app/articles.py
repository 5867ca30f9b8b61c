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
