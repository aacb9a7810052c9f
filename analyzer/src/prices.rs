//! Prices: what one GPU-hour and one kWh cost, from the defaults, the `--config` file
//! ([`ReportConfig`], TOML, strict) and the flags, later winning ([`prices`]).
//!
//! A leaf: the report, replay, notify and jobs price with it. This module only reads and checks
//! prices (and the config file); it does not apply them (the report's sections do).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A config file that cannot be read, or a price out of range.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    #[error("reading config {path}: {reason}")]
    Config { path: String, reason: String },
    #[error("bad price {name} {value}: expected a number from 0 to 1e9")]
    Price { name: &'static str, value: f64 },
}

/// Prices the report uses to turn hours and energy into money.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prices {
    /// Price of one GPU-hour (whole GPU).
    pub gpu_hour: f64,
    /// Price of one kWh.
    pub kwh: f64,
    /// Currency label, only printed.
    pub currency: String,
    /// Where the prices came from: `default`, `config:<file>`, `flags` (or a mix, comma-separated).
    pub source: String,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            gpu_hour: 2.0,
            kwh: 0.15,
            currency: "USD".into(),
            source: "default".into(),
        }
    }
}

/// The `--config` file (TOML).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportConfig {
    #[serde(default)]
    pub price: PriceConfig,
}

/// `[price]` of the config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    pub gpu_hour: Option<f64>,
    pub kwh: Option<f64>,
    pub currency: Option<String>,
}

impl ReportConfig {
    /// Reads and strictly parses a config file.
    pub fn load(path: &Path) -> Result<Self, PriceError> {
        let err = |reason: String| PriceError::Config {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        toml::from_str(&text).map_err(|e| err(e.to_string().trim_end().replace('\n', " ")))
    }
}

/// Prices from the defaults, then the config file, then the flags (later wins); each checked.
pub fn prices(
    config: Option<(&Path, &ReportConfig)>,
    gpu_hour: Option<f64>,
    kwh: Option<f64>,
) -> Result<Prices, PriceError> {
    let mut p = Prices::default();
    let mut from = Vec::new();
    if let Some((path, c)) = config {
        if c.price.gpu_hour.is_some() || c.price.kwh.is_some() || c.price.currency.is_some() {
            from.push(format!("config:{}", path.display()));
        }
        p.gpu_hour = c.price.gpu_hour.unwrap_or(p.gpu_hour);
        p.kwh = c.price.kwh.unwrap_or(p.kwh);
        if let Some(cur) = &c.price.currency {
            p.currency = cur.clone();
        }
    }
    if gpu_hour.is_some() || kwh.is_some() {
        from.push("flags".into());
    }
    p.gpu_hour = gpu_hour.unwrap_or(p.gpu_hour);
    p.kwh = kwh.unwrap_or(p.kwh);
    for (name, v) in [("gpu_hour", p.gpu_hour), ("kwh", p.kwh)] {
        // Bounded so that no product of a price and a period's hours reaches infinity.
        if !(v.is_finite() && (0.0..=MAX_PRICE).contains(&v)) {
            return Err(PriceError::Price { name, value: v });
        }
    }
    if !from.is_empty() {
        p.source = from.join(",");
    }
    Ok(p)
}

/// The highest price of a GPU-hour or a kWh taken (a billion, in any currency).
pub const MAX_PRICE: f64 = 1e9;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_layer_default_config_flags() {
        let c: ReportConfig =
            toml::from_str("[price]\ngpu_hour = 3.5\ncurrency = \"EUR\"\n").unwrap();
        let p = prices(Some((Path::new("r.toml"), &c)), None, Some(0.4)).unwrap();
        assert_eq!(p.gpu_hour, 3.5);
        assert_eq!(p.kwh, 0.4);
        assert_eq!(p.currency, "EUR");
        assert_eq!(p.source, "config:r.toml,flags");
        assert_eq!(prices(None, None, None).unwrap(), Prices::default());
        assert!(prices(None, Some(1e300), None).is_err());
        assert!(matches!(
            prices(None, Some(-1.0), None),
            Err(PriceError::Price {
                name: "gpu_hour",
                ..
            })
        ));
    }

    #[test]
    fn config_rejects_unknown_keys() {
        let e = toml::from_str::<ReportConfig>("[price]\ngpu_hours = 3\n").unwrap_err();
        assert!(e.to_string().contains("gpu_hours"), "{e}");
    }
}
