//! How one config value is checked, as Kafka's `ConfigDef` does it: parsed as the
//! config's type, then held against its validator (`atLeast`, `between`, `in`,
//! `ValidList.in`, ...). The refusal reasons are Kafka's words, so a tool that matches on
//! them (or a person who searches for them) finds what Kafka would have said.

/// Kafka's config types, with their DescribeConfigs v3+ wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    Class = 8,
    Password = 9,
}

/// What a config's value must satisfy once parsed as its type.
#[derive(Debug, Clone, Copy)]
pub enum Validator {
    /// Any value of the type.
    Any,
    /// A number at least the bound (`ConfigDef.Range.atLeast`).
    AtLeast(f64),
    /// A number within both bounds (`ConfigDef.Range.between`).
    Between(f64, f64),
    /// One of these strings (`ConfigDef.ValidString.in`).
    OneOf(&'static [&'static str]),
    /// A list whose every item is one of these (`ConfigDef.ValidList.in`); empty allowed
    /// only when `empty_ok`.
    ListOf {
        items: &'static [&'static str],
        empty_ok: bool,
    },
    /// Something only a function can say (`ThrottledReplicaListValidator`, ...).
    Custom(fn(&str) -> Result<(), String>),
}

impl ConfigType {
    /// The type's name in Kafka's "Not a number of type INT" message.
    fn kafka_name(self) -> &'static str {
        match self {
            Self::Boolean => "BOOLEAN",
            Self::String => "STRING",
            Self::Int => "INT",
            Self::Short => "SHORT",
            Self::Long => "LONG",
            Self::Double => "DOUBLE",
            Self::List => "LIST",
            Self::Class => "CLASS",
            Self::Password => "PASSWORD",
        }
    }
}

/// Checks `value` as a config of `kind` held to `validator`; the reason is Kafka's.
pub fn check(kind: ConfigType, validator: Validator, value: &str) -> Result<(), String> {
    let v = value.trim();
    let number = parse_number(kind, v)?;
    match (validator, number) {
        (Validator::Any, _) => Ok(()),
        (Validator::AtLeast(min), Some(n)) if n < min => {
            Err(format!("Value must be at least {}", show(min)))
        }
        (Validator::Between(min, _), Some(n)) if n < min => {
            Err(format!("Value must be at least {}", show(min)))
        }
        (Validator::Between(_, max), Some(n)) if n > max => {
            Err(format!("Value must be no more than {}", show(max)))
        }
        (Validator::AtLeast(_) | Validator::Between(..), _) => Ok(()),
        (Validator::OneOf(allowed), _) if allowed.contains(&v) => Ok(()),
        (Validator::OneOf(allowed), _) => {
            Err(format!("String must be one of: {}", allowed.join(", ")))
        }
        (Validator::ListOf { items, empty_ok }, _) => {
            let given: Vec<&str> = list_items(v).collect();
            if given.is_empty() && !empty_ok {
                return Err("Empty list is not allowed".into());
            }
            match given.iter().find(|item| !items.contains(item)) {
                Some(_) => Err(format!("String must be one of: {}", items.join(", "))),
                None => Ok(()),
            }
        }
        (Validator::Custom(f), _) => f(v),
    }
}

/// The items of a LIST value: comma-separated, trimmed, empty ones dropped.
pub fn list_items(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// `Some(n)` for the numeric types, `None` for the others (checked for their shape).
fn parse_number(kind: ConfigType, v: &str) -> Result<Option<f64>, String> {
    let not_a = || format!("Not a number of type {}", kind.kafka_name());
    match kind {
        ConfigType::Int => v
            .parse::<i32>()
            .map(|n| Some(f64::from(n)))
            .map_err(|_| not_a()),
        ConfigType::Short => v
            .parse::<i16>()
            .map(|n| Some(f64::from(n)))
            .map_err(|_| not_a()),
        // Longs compare as f64: exact for every bound a table here uses.
        ConfigType::Long => v
            .parse::<i64>()
            .map(|n| Some(n as f64))
            .map_err(|_| not_a()),
        ConfigType::Double => match v.parse::<f64>() {
            Ok(n) if n.is_finite() => Ok(Some(n)),
            _ => Err(not_a()),
        },
        ConfigType::Boolean => match v.to_ascii_lowercase().as_str() {
            "true" | "false" => Ok(None),
            _ => Err("Expected value to be either true or false".into()),
        },
        ConfigType::Class if v.is_empty() => Err("Expected a Class but got an empty value".into()),
        ConfigType::String | ConfigType::List | ConfigType::Class | ConfigType::Password => {
            Ok(None)
        }
    }
}

/// A bound as Kafka prints it (`1`, not `1.0`, for whole numbers; `0.5` otherwise).
fn show(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_parsed_as_their_type_then_validated_with_kafkas_words() {
        use ConfigType::*;
        assert_eq!(check(Int, Validator::AtLeast(0.0), "12"), Ok(()));
        assert_eq!(
            check(Int, Validator::AtLeast(0.0), "x"),
            Err("Not a number of type INT".into())
        );
        assert_eq!(
            check(Int, Validator::Any, "3000000000"),
            Err("Not a number of type INT".into())
        );
        assert_eq!(check(Long, Validator::Any, "3000000000"), Ok(()));
        assert_eq!(
            check(Long, Validator::AtLeast(-1.0), "-2"),
            Err("Value must be at least -1".into())
        );
        assert_eq!(
            check(Double, Validator::Between(0.0, 1.0), "1.5"),
            Err("Value must be no more than 1".into())
        );
        assert_eq!(check(Double, Validator::Between(0.0, 1.0), "0.25"), Ok(()));
        assert!(check(Double, Validator::Any, "NaN").is_err());
        assert_eq!(check(Boolean, Validator::Any, "TRUE"), Ok(()));
        assert!(check(Boolean, Validator::Any, "yes").is_err());
        let policy = Validator::ListOf {
            items: &["compact", "delete"],
            empty_ok: false,
        };
        assert_eq!(check(List, policy, "delete, compact"), Ok(()));
        assert!(check(List, policy, "shred").is_err());
        assert!(check(List, policy, "").is_err());
        let timestamp = Validator::OneOf(&["CreateTime", "LogAppendTime"]);
        assert_eq!(
            check(String, timestamp, "Now"),
            Err("String must be one of: CreateTime, LogAppendTime".into())
        );
        assert_eq!(
            check(Long, Validator::AtLeast(0.0), &i64::MAX.to_string()),
            Ok(())
        );
    }
}
