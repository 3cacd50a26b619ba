//! The Porter stemmer (M. F. Porter, "An algorithm for suffix stripping", 1980), as in the author's
//! reference implementation and SQLite FTS5's `porter` tokenizer: `connections`, `connected` and
//! `connecting` all become `connect`, so a question and a help page meet on the word, not its form.
//!
//! Only words of lowercase ASCII letters longer than two letters are stemmed; anything else (digits,
//! other scripts) is returned as it is.

/// A word being stemmed: its letters, `k` the index of its last letter, `j` a working index.
struct Word {
    b: Vec<u8>,
    k: isize,
    j: isize,
}

impl Word {
    fn at(&self, i: isize) -> u8 {
        self.b[i as usize]
    }

    /// Whether letter `i` is a consonant (`y` after a consonant is a vowel).
    fn cons(&self, i: isize) -> bool {
        match self.at(i) {
            b'a' | b'e' | b'i' | b'o' | b'u' => false,
            b'y' => i == 0 || !self.cons(i - 1),
            _ => true,
        }
    }

    /// The number of vowel-consonant sequences in `b[0..=j]`.
    fn m(&self) -> usize {
        let mut n = 0;
        let mut i = 0;
        loop {
            if i > self.j {
                return n;
            }
            if !self.cons(i) {
                break;
            }
            i += 1;
        }
        i += 1;
        loop {
            loop {
                if i > self.j {
                    return n;
                }
                if self.cons(i) {
                    break;
                }
                i += 1;
            }
            i += 1;
            n += 1;
            loop {
                if i > self.j {
                    return n;
                }
                if !self.cons(i) {
                    break;
                }
                i += 1;
            }
            i += 1;
        }
    }

    /// Whether `b[0..=j]` contains a vowel.
    fn vowel_in_stem(&self) -> bool {
        (0..=self.j).any(|i| !self.cons(i))
    }

    /// Whether `b[i-1..=i]` is a double consonant.
    fn double_c(&self, i: isize) -> bool {
        i >= 1 && self.at(i) == self.at(i - 1) && self.cons(i)
    }

    /// Whether `b[i-2..=i]` is consonant-vowel-consonant and the last is not w, x or y.
    fn cvc(&self, i: isize) -> bool {
        if i < 2 || !self.cons(i) || self.cons(i - 1) || !self.cons(i - 2) {
            return false;
        }
        !matches!(self.at(i), b'w' | b'x' | b'y')
    }

    /// Whether the word ends with `s`; sets `j` to the index before the ending.
    fn ends(&mut self, s: &str) -> bool {
        let s = s.as_bytes();
        let len = s.len() as isize;
        if len > self.k + 1 {
            return false;
        }
        let start = (self.k - len + 1) as usize;
        if &self.b[start..=self.k as usize] != s {
            return false;
        }
        self.j = self.k - len;
        true
    }

    /// Replaces `b[j+1..=k]` with `s`.
    fn set_to(&mut self, s: &str) {
        let end = (self.j + 1) as usize;
        self.b.truncate(end);
        self.b.extend_from_slice(s.as_bytes());
        self.k = self.j + s.len() as isize;
    }

    /// `set_to(s)` when the stem has a measure above 0.
    fn r(&mut self, s: &str) {
        if self.m() > 0 {
            self.set_to(s);
        }
    }

    /// Plurals and -ed / -ing.
    fn step1ab(&mut self) {
        if self.at(self.k) == b's' {
            if self.ends("sses") {
                self.k -= 2;
            } else if self.ends("ies") {
                self.set_to("i");
            } else if self.at(self.k - 1) != b's' {
                self.k -= 1;
            }
        }
        if self.ends("eed") {
            if self.m() > 0 {
                self.k -= 1;
            }
        } else if (self.ends("ed") || self.ends("ing")) && self.vowel_in_stem() {
            self.k = self.j;
            self.b.truncate((self.k + 1) as usize);
            if self.ends("at") {
                self.set_to("ate");
            } else if self.ends("bl") {
                self.set_to("ble");
            } else if self.ends("iz") {
                self.set_to("ize");
            } else if self.double_c(self.k) {
                self.k -= 1;
                if matches!(self.at(self.k), b'l' | b's' | b'z') {
                    self.k += 1;
                }
            } else {
                self.j = self.k;
                if self.m() == 1 && self.cvc(self.k) {
                    self.set_to("e");
                }
            }
        }
        self.b.truncate((self.k + 1) as usize);
    }

    /// Terminal y to i when there is another vowel in the stem.
    fn step1c(&mut self) {
        if self.ends("y") && self.vowel_in_stem() {
            let k = self.k as usize;
            self.b[k] = b'i';
        }
    }

    /// The first of `pairs` (ending, replacement) the word ends with is replaced when m() > 0.
    fn replace_first(&mut self, pairs: &[(&str, &str)]) {
        for (ending, replacement) in pairs {
            if self.ends(ending) {
                self.r(replacement);
                return;
            }
        }
    }

    /// Double suffixes to single ones.
    fn step2(&mut self) {
        if self.k < 1 {
            return;
        }
        let pairs: &[(&str, &str)] = match self.at(self.k - 1) {
            b'a' => &[("ational", "ate"), ("tional", "tion")],
            b'c' => &[("enci", "ence"), ("anci", "ance")],
            b'e' => &[("izer", "ize")],
            b'l' => &[
                ("bli", "ble"),
                ("alli", "al"),
                ("entli", "ent"),
                ("eli", "e"),
                ("ousli", "ous"),
            ],
            b'o' => &[("ization", "ize"), ("ation", "ate"), ("ator", "ate")],
            b's' => &[
                ("alism", "al"),
                ("iveness", "ive"),
                ("fulness", "ful"),
                ("ousness", "ous"),
            ],
            b't' => &[("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")],
            b'g' => &[("logi", "log")],
            _ => return,
        };
        self.replace_first(pairs);
    }

    /// -ic-, -full, -ness etc.
    fn step3(&mut self) {
        let pairs: &[(&str, &str)] = match self.at(self.k) {
            b'e' => &[("icate", "ic"), ("ative", ""), ("alize", "al")],
            b'i' => &[("iciti", "ic")],
            b'l' => &[("ical", "ic"), ("ful", "")],
            b's' => &[("ness", "")],
            _ => return,
        };
        self.replace_first(pairs);
    }

    /// -ant, -ence etc. in a stem of measure above 1.
    fn step4(&mut self) {
        if self.k < 1 {
            return;
        }
        let found = match self.at(self.k - 1) {
            b'a' => self.ends("al"),
            b'c' => self.ends("ance") || self.ends("ence"),
            b'e' => self.ends("er"),
            b'i' => self.ends("ic"),
            b'l' => self.ends("able") || self.ends("ible"),
            b'n' => self.ends("ant") || self.ends("ement") || self.ends("ment") || self.ends("ent"),
            b'o' => {
                (self.ends("ion") && self.j >= 0 && matches!(self.at(self.j), b's' | b't'))
                    || self.ends("ou")
            }
            b's' => self.ends("ism"),
            b't' => self.ends("ate") || self.ends("iti"),
            b'u' => self.ends("ous"),
            b'v' => self.ends("ive"),
            b'z' => self.ends("ize"),
            _ => false,
        };
        if found && self.m() > 1 {
            self.k = self.j;
        }
    }

    /// A final -e, and -ll to -l, in a long enough stem.
    fn step5(&mut self) {
        self.j = self.k;
        if self.at(self.k) == b'e' {
            let a = self.m();
            if a > 1 || (a == 1 && !self.cvc(self.k - 1)) {
                self.k -= 1;
            }
        }
        if self.at(self.k) == b'l' && self.double_c(self.k) && self.m() > 1 {
            self.k -= 1;
        }
    }
}

/// The stem of `word` (lowercase); see the module's documentation.
pub fn stem(word: &str) -> String {
    if word.len() <= 2 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return word.to_owned();
    }
    let mut w = Word {
        b: word.as_bytes().to_vec(),
        k: word.len() as isize - 1,
        j: 0,
    };
    w.step1ab();
    if w.k > 0 {
        w.step1c();
        w.b.truncate((w.k + 1) as usize);
        w.step2();
        w.b.truncate((w.k + 1) as usize);
        w.step3();
        w.b.truncate((w.k + 1) as usize);
        w.step4();
        w.b.truncate((w.k + 1) as usize);
        w.step5();
    }
    w.b.truncate((w.k + 1) as usize);
    String::from_utf8(w.b).unwrap_or_else(|_| word.to_owned())
}

#[cfg(test)]
mod tests {
    use super::stem;

    /// Examples of Porter's paper and the reference vocabulary's output.
    #[test]
    fn porters_examples() {
        for (word, want) in [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("ties", "ti"),
            ("caress", "caress"),
            ("cats", "cat"),
            ("feed", "feed"),
            ("agreed", "agre"),
            ("plastered", "plaster"),
            ("bled", "bled"),
            ("motoring", "motor"),
            ("sing", "sing"),
            ("conflated", "conflat"),
            ("troubled", "troubl"),
            ("sized", "size"),
            ("hopping", "hop"),
            ("tanned", "tan"),
            ("falling", "fall"),
            ("hissing", "hiss"),
            ("fizzed", "fizz"),
            ("failing", "fail"),
            ("filing", "file"),
            ("happy", "happi"),
            ("sky", "sky"),
            ("relational", "relat"),
            ("conditional", "condit"),
            ("rational", "ration"),
            ("valenci", "valenc"),
            ("digitizer", "digit"),
            ("conformabli", "conform"),
            ("radicalli", "radic"),
            ("differentli", "differ"),
            ("vileli", "vile"),
            ("analogousli", "analog"),
            ("vietnamization", "vietnam"),
            ("predication", "predic"),
            ("operator", "oper"),
            ("feudalism", "feudal"),
            ("decisiveness", "decis"),
            ("hopefulness", "hope"),
            ("callousness", "callous"),
            ("formaliti", "formal"),
            ("sensitiviti", "sensit"),
            ("sensibiliti", "sensibl"),
            ("triplicate", "triplic"),
            ("formative", "form"),
            ("formalize", "formal"),
            ("electriciti", "electr"),
            ("electrical", "electr"),
            ("hopeful", "hope"),
            ("goodness", "good"),
            ("revival", "reviv"),
            ("allowance", "allow"),
            ("inference", "infer"),
            ("airliner", "airlin"),
            ("gyroscopic", "gyroscop"),
            ("adjustable", "adjust"),
            ("defensible", "defens"),
            ("irritant", "irrit"),
            ("replacement", "replac"),
            ("adjustment", "adjust"),
            ("dependent", "depend"),
            ("adoption", "adopt"),
            ("homologou", "homolog"),
            ("communism", "commun"),
            ("activate", "activ"),
            ("angulariti", "angular"),
            ("homologous", "homolog"),
            ("effective", "effect"),
            ("bowdlerize", "bowdler"),
            ("probate", "probat"),
            ("rate", "rate"),
            ("cease", "ceas"),
            ("controll", "control"),
            ("roll", "roll"),
            ("connections", "connect"),
            ("connecting", "connect"),
            ("generalizations", "gener"),
            ("ion", "ion"),
            ("is", "is"),
            ("dialogs", "dialog"),
            ("calendar", "calendar"),
            ("x11", "x11"),
            ("é", "é"),
        ] {
            assert_eq!(stem(word), want, "{word}");
        }
    }
}
