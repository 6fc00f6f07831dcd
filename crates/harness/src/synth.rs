//! Deterministic, realistic revision histories of wiki-like pages, for the demo and for
//! benchmarks that must run without the shared corpus.
//!
//! Each page is an article of sections and paragraphs; each revision applies a few edits (a word
//! changed, a sentence added or removed, now and then a new paragraph), and every revision is
//! rendered as a complete HTML page with the same head, navigation and footer, like a real render.
//! The same seed always gives the same bytes.

/// A small, fast, reproducible generator (xorshift64*).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `seed`: the same seed, the same numbers.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

const SYLLABLES: [&str; 24] = [
    "ka", "lo", "mi", "ren", "to", "sa", "vel", "ur", "an", "di", "po", "ste", "ri", "gan", "hu",
    "ne", "or", "bi", "cal", "th", "em", "is", "qua", "ly",
];

fn word(rng: &mut Rng) -> String {
    (0..1 + rng.below(3))
        .map(|_| SYLLABLES[rng.below(SYLLABLES.len() as u64) as usize])
        .collect()
}

fn sentence(rng: &mut Rng) -> String {
    let n = 6 + rng.below(14);
    let mut s: Vec<String> = (0..n).map(|_| word(rng)).collect();
    if rng.below(4) == 0 {
        let target = word(rng);
        s[0] = format!("<a href=\"/wiki/{target}\">{}</a>", s[0]);
    }
    let mut text = s.join(" ");
    text[..1].make_ascii_uppercase();
    text.push('.');
    text
}

/// One page's article, edited revision by revision.
#[derive(Clone, Debug)]
pub struct Article {
    /// The page's title.
    pub title: String,
    sections: Vec<(String, Vec<Vec<String>>)>,
    rng: Rng,
}

impl Article {
    /// A new article of roughly `paragraphs` paragraphs.
    pub fn new(seed: u64, title: String, paragraphs: usize) -> Article {
        let mut rng = Rng::new(seed);
        let mut sections = Vec::new();
        let mut left = paragraphs.max(1);
        while left > 0 {
            let n = (1 + rng.below(4) as usize).min(left);
            left -= n;
            let paras = (0..n)
                .map(|_| (0..2 + rng.below(5)).map(|_| sentence(&mut rng)).collect())
                .collect();
            sections.push((word(&mut rng), paras));
        }
        Article {
            title,
            sections,
            rng,
        }
    }

    /// Applies one revision's worth of edits.
    pub fn edit(&mut self) {
        for _ in 0..1 + self.rng.below(4) {
            let s = self.rng.below(self.sections.len() as u64) as usize;
            let paras = &mut self.sections[s].1;
            let p = self.rng.below(paras.len() as u64) as usize;
            let sentences = &mut paras[p];
            let i = self.rng.below(sentences.len() as u64) as usize;
            match self.rng.below(10) {
                0..=4 => {
                    let mut words: Vec<String> =
                        sentences[i].split(' ').map(String::from).collect();
                    let w = self.rng.below(words.len() as u64) as usize;
                    words[w] = word(&mut self.rng);
                    sentences[i] = words.join(" ");
                }
                5..=6 => sentences.insert(i, sentence(&mut self.rng)),
                7 if sentences.len() > 1 => {
                    sentences.remove(i);
                }
                _ => paras.insert(
                    p,
                    (0..2 + self.rng.below(4))
                        .map(|_| sentence(&mut self.rng))
                        .collect(),
                ),
            }
        }
    }

    /// The current text rendered as a complete HTML page.
    pub fn render(&self, rev: u64) -> Vec<u8> {
        let mut html = String::with_capacity(8192);
        html.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>");
        html.push_str(&self.title);
        html.push_str(
            " - Wikipedia</title>\n<link rel=\"stylesheet\" \
            href=\"/w/load.php?modules=site.styles&amp;only=styles\">\n",
        );
        html.push_str(
            "<style>.mw-body{margin:0 \
            auto;max-width:960px}.infobox{float:right;border:1px solid #a2a9b1}</style>\n",
        );
        html.push_str(&format!(
            "<meta property=\"mw:revisionId\" content=\"{rev}\"></head>\n<body \
            class=\"mw-body\"><nav id=\"p-navigation\"><ul><li><a href=\"/wiki/Main_Page\">Main \
            page</a></li><li><a href=\"/wiki/Special:Random\">Random \
            article</a></li></ul></nav>\n"
        ));
        html.push_str(&format!("<h1 id=\"firstHeading\">{}</h1>\n", self.title));
        for (heading, paras) in &self.sections {
            html.push_str(&format!("<h2 id=\"{heading}\">{heading}</h2>\n"));
            for p in paras {
                html.push_str("<p>");
                html.push_str(&p.join(" "));
                html.push_str("</p>\n");
            }
        }
        html.push_str(
            "<footer id=\"footer\">Text is available under the Creative Commons \
            Attribution-ShareAlike License.</footer></body></html>\n",
        );
        html.into_bytes()
    }
}

/// One generated revision.
#[derive(Clone, Debug)]
pub struct Revision {
    /// The page's title.
    pub title: String,
    /// The revision number, increasing through a page's history.
    pub rev: u64,
    /// When it was saved, in seconds since the epoch.
    pub timestamp: i64,
    /// The rendered HTML.
    pub html: Vec<u8>,
}

/// `pages` pages × `revisions` revisions each, page by page, oldest revision first. Revision
/// numbers grow across the whole wiki, timestamps by minutes to days.
pub fn histories(
    seed: u64,
    pages: usize,
    revisions: usize,
    paragraphs: usize,
) -> impl Iterator<Item = Revision> {
    let mut rev = 1000u64;
    (0..pages).flat_map(move |page| {
        let mut rng = Rng::new(seed ^ (page as u64).wrapping_mul(0xA24B_AED4_963E_E407));
        let mut article = Article::new(
            rng.next_u64(),
            format!("Page {page}"),
            paragraphs / 2 + rng.below(paragraphs as u64 + 1) as usize,
        );
        let mut time = 1_600_000_000 + rng.below(10_000_000) as i64;
        (0..revisions)
            .map(|r| {
                if r > 0 {
                    article.edit();
                }
                rev += 1 + rng.below(50);
                time += 60 + rng.below(3 * 86_400) as i64;
                Revision {
                    title: article.title.clone(),
                    rev,
                    timestamp: time,
                    html: article.render(rev),
                }
            })
            .collect::<Vec<_>>()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_edited() {
        let a: Vec<Revision> = histories(7, 3, 5, 12).collect();
        let b: Vec<Revision> = histories(7, 3, 5, 12).collect();
        assert_eq!(a.len(), 15);
        assert!(a
            .iter()
            .zip(&b)
            .all(|(x, y)| x.html == y.html && x.rev == y.rev));
        assert_ne!(a[0].html, a[1].html, "each revision edits the page");
        assert!(a.windows(2).all(|w| w[1].rev > w[0].rev));
        let lines = |h: &[u8]| {
            String::from_utf8(h.to_vec())
                .unwrap()
                .lines()
                .map(String::from)
                .collect::<std::collections::HashSet<_>>()
        };
        let (x, y) = (lines(&a[0].html), lines(&a[1].html));
        assert!(
            x.intersection(&y).count() * 2 > x.len(),
            "revisions share their head and most text"
        );
    }
}
