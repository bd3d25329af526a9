//! Who a connection is: the principal every authorization decision names.
//!
//! - PLAINTEXT, and SSL without a client certificate: `User:ANONYMOUS` (Kafka's rule).
//! - SSL with a verified client certificate: `User:` and the certificate's subject,
//!   rewritten by `ssl.principal.mapping.rules` ([`SslPrincipalMapper`]).
//! - SASL: `User:` and the authenticated user name.

use regex::Regex;

/// Kafka's `ssl.principal.mapping.rules`: a comma-separated list of `DEFAULT` (the
/// subject as it is) and `RULE:pattern/replacement/[L|U]` (when `pattern` matches the
/// whole subject, the subject rewritten, optionally lower- or upper-cased). The first
/// rule that applies wins; a subject no rule applies to fails the connection, as in
/// Kafka.
#[derive(Debug, Clone)]
pub struct SslPrincipalMapper {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Rewrite {
        whole: Regex,
        pattern: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    #[error("invalid ssl.principal.mapping.rules at {0:?}")]
    Syntax(String),
    #[error("invalid pattern in ssl.principal.mapping.rules: {0}")]
    Pattern(String),
}

impl Default for SslPrincipalMapper {
    fn default() -> Self {
        Self {
            rules: vec![Rule::Default],
        }
    }
}

impl SslPrincipalMapper {
    pub fn parse(rules: &str) -> Result<Self, MappingError> {
        let mut parsed = Vec::new();
        let mut rest = rules.trim();
        while !rest.is_empty() {
            let (rule, after) = if let Some(after) = rest.strip_prefix("DEFAULT") {
                (Rule::Default, after)
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_unescaped_slash(after)
                    .ok_or_else(|| MappingError::Syntax(rest.to_string()))?;
                let (replacement, after) = until_unescaped_slash(after)
                    .ok_or_else(|| MappingError::Syntax(rest.to_string()))?;
                let (case, after) = match after.as_bytes().first() {
                    Some(b'L') => (Case::Lower, &after[1..]),
                    Some(b'U') => (Case::Upper, &after[1..]),
                    _ => (Case::Keep, after),
                };
                (rewrite_rule(pattern, replacement, case)?, after)
            } else {
                return Err(MappingError::Syntax(rest.to_string()));
            };
            parsed.push(rule);
            let after = after.trim_start();
            rest = match after.strip_prefix(',') {
                Some(next) => next.trim_start(),
                None if after.is_empty() => after,
                None => return Err(MappingError::Syntax(after.to_string())),
            };
        }
        Ok(Self { rules: parsed })
    }

    /// The principal name for a certificate subject, or `None` when no rule applies.
    pub fn name(&self, subject: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            Rule::Default => Some(subject.to_string()),
            Rule::Rewrite {
                whole,
                pattern,
                replacement,
                case,
            } => {
                if !whole.is_match(subject) {
                    return None;
                }
                let name = pattern.replace_all(subject, replacement.as_str());
                Some(match case {
                    Case::Keep => name.into_owned(),
                    Case::Lower => name.to_lowercase(),
                    Case::Upper => name.to_uppercase(),
                })
            }
        })
    }
}

/// The text up to the first `/` not preceded by `\`, and what follows that `/`.
fn until_unescaped_slash(s: &str) -> Option<(&str, &str)> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'/' => return Some((&s[..i], &s[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

fn rewrite_rule(pattern: &str, replacement: &str, case: Case) -> Result<Rule, MappingError> {
    let compile = |p: &str| Regex::new(p).map_err(|e| MappingError::Pattern(e.to_string()));
    Ok(Rule::Rewrite {
        // Java's `Matcher.matches()`: the pattern must match the whole subject.
        whole: compile(&format!("^(?:{pattern})$"))?,
        pattern: compile(pattern)?,
        replacement: java_replacement(replacement),
        case,
    })
}

/// Java's `$1` group references in Rust's `${1}` form (Rust would read `$1a` as a group
/// named `1a`); `\x` is a literal `x` in Java, `$$` in Rust for a dollar.
fn java_replacement(java: &str) -> String {
    let mut out = String::with_capacity(java.len() + 4);
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' if chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push_str("${");
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    out.push(d);
                    chars.next();
                }
                out.push('}');
            }
            '$' => out.push_str("$$"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_rule_keeps_the_subject() {
        let mapper = SslPrincipalMapper::default();
        assert_eq!(
            mapper.name("CN=alice,O=acme").as_deref(),
            Some("CN=alice,O=acme")
        );
    }

    /// The examples of Kafka's documentation of `ssl.principal.mapping.rules`.
    #[test]
    fn kafka_documentation_examples_map_as_documented() {
        let mapper = SslPrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT",
        )
        .expect("rules parse");
        assert_eq!(
            mapper
                .name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown")
                .as_deref(),
            Some("serviceuser")
        );
        assert_eq!(
            mapper
                .name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown")
                .as_deref(),
            Some("adminuser@admin")
        );
        assert_eq!(
            mapper.name("OU=x,CN=Bob.Smith,O=y").as_deref(),
            Some("bob.smith")
        );
        assert_eq!(mapper.name("O=nobody").as_deref(), Some("O=nobody"));
    }

    #[test]
    fn upper_casing_and_no_matching_rule() {
        let mapper = SslPrincipalMapper::parse(" RULE:^CN=([a-z]+)$/$1/U ").expect("rule");
        assert_eq!(mapper.name("CN=alice").as_deref(), Some("ALICE"));
        assert_eq!(mapper.name("CN=alice,O=x"), None);
    }

    #[test]
    fn malformed_rules_are_refused() {
        for bad in [
            "RULE:abc",
            "RULE:a/b",
            "NOPE",
            "DEFAULT DEFAULT",
            "RULE:(/x/",
        ] {
            assert!(SslPrincipalMapper::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn java_group_references_become_rust_ones() {
        assert_eq!(java_replacement("$1@$2"), "${1}@${2}");
        assert_eq!(java_replacement("$1a"), "${1}a");
        assert_eq!(java_replacement("\\$x$"), "$$x$$");
    }
}
