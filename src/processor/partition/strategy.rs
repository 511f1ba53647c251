//! The write-out strategy: how a partition's write-outs reach Kafka,
//! chosen once from the configuration (guarantee × changelog × status
//! delivery) when the task starts. Pure; the mode it opens is
//! [`super::mode::WriteOutMode`].

use crate::config::{Config, Guarantee, OutboxDelivery};

/// Where a partition's status changes go (the outbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusRoute {
    /// The outbox is off.
    Off,
    /// Stored as outbox rows in each write-out's batch; a relay publishes
    /// them (`outbox.delivery = "relay"`, at_least_once).
    Relay,
    /// With each write-out: in its transaction with a changelog, otherwise
    /// published and acknowledged before the store batch. A relay still
    /// publishes rows an earlier relay delivery left, before the first.
    WithWriteOut,
    /// exactly_once: in each write-out's transaction; nothing is relayed.
    InTransaction,
}

/// The write-out strategy: chosen once per task from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// No changelog: a write-out is the store batch alone; dead letters are
    /// produced when found.
    StoreOnly { status: StatusRoute },
    /// A changelog under at_least_once: each write-out's changelog records
    /// (and, with write-out delivery, its status changes) are one
    /// transaction of the partition's producer, which the next owner
    /// fences; dead letters are produced when found.
    Changelog { topic: String, status: StatusRoute },
    /// exactly_once (which needs the changelog): dead letters are held for
    /// the write-out, whose one transaction carries them, the changelog
    /// records, the status changes and the input offsets.
    Everything { topic: String, status: StatusRoute },
}

impl Strategy {
    /// The strategy a guarantee, a changelog topic and an outbox (with its
    /// delivery) make. exactly_once without a changelog is refused by the
    /// configuration's validation; here it writes the store alone.
    pub(crate) fn choose(
        guarantee: Guarantee,
        changelog: Option<String>,
        outbox: Option<OutboxDelivery>,
    ) -> Self {
        let status = match (guarantee, outbox) {
            (_, None) => StatusRoute::Off,
            (Guarantee::ExactlyOnce, Some(_)) if changelog.is_some() => StatusRoute::InTransaction,
            (_, Some(OutboxDelivery::WriteOut)) => StatusRoute::WithWriteOut,
            (_, Some(OutboxDelivery::Relay)) => StatusRoute::Relay,
        };
        match (guarantee, changelog) {
            (_, None) => Strategy::StoreOnly { status },
            (Guarantee::AtLeastOnce, Some(topic)) => Strategy::Changelog { topic, status },
            (Guarantee::ExactlyOnce, Some(topic)) => Strategy::Everything { topic, status },
        }
    }

    /// The configuration's strategy.
    pub(crate) fn of(config: &Config) -> Self {
        let outbox = config.output_topic().map(|_| config.outbox.delivery);
        Strategy::choose(
            config.processing.guarantee,
            config.changelog_topic(),
            outbox,
        )
    }

    /// The changelog topic, when there is one.
    pub(crate) fn changelog(&self) -> Option<&str> {
        match self {
            Strategy::StoreOnly { .. } => None,
            Strategy::Changelog { topic, .. } | Strategy::Everything { topic, .. } => Some(topic),
        }
    }

    /// Where status changes go.
    pub(crate) fn status(&self) -> StatusRoute {
        match self {
            Strategy::StoreOnly { status }
            | Strategy::Changelog { status, .. }
            | Strategy::Everything { status, .. } => *status,
        }
    }

    /// True when status changes leave with the write-outs (in their
    /// transaction, or acknowledged before the store batch), false when a
    /// relay publishes them or the outbox is off.
    pub(crate) fn status_in_write_outs(&self) -> bool {
        matches!(
            self.status(),
            StatusRoute::WithWriteOut | StatusRoute::InTransaction
        )
    }

    /// The delivery the configuration gives status changes, whether the
    /// outbox is on or not (the status page and `/api/status` name it):
    /// `"write_out"` or `"relay"`.
    pub(crate) fn delivery_word(config: &Config) -> &'static str {
        let outbox = Some(config.outbox.delivery);
        let strategy = Strategy::choose(
            config.processing.guarantee,
            config.changelog_topic(),
            outbox,
        );
        if strategy.status_in_write_outs() {
            "write_out"
        } else {
            "relay"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_guarantee_changelog_and_delivery_chooses_one_strategy() {
        use Guarantee::{AtLeastOnce, ExactlyOnce};
        use OutboxDelivery::{Relay, WriteOut};
        let topic = || Some("changelog".to_string());
        let changelog = |status| Strategy::Changelog {
            topic: "changelog".into(),
            status,
        };
        let everything = |status| Strategy::Everything {
            topic: "changelog".into(),
            status,
        };
        let cases = [
            (
                AtLeastOnce,
                None,
                None,
                Strategy::StoreOnly {
                    status: StatusRoute::Off,
                },
            ),
            (
                AtLeastOnce,
                None,
                Some(Relay),
                Strategy::StoreOnly {
                    status: StatusRoute::Relay,
                },
            ),
            (
                AtLeastOnce,
                None,
                Some(WriteOut),
                Strategy::StoreOnly {
                    status: StatusRoute::WithWriteOut,
                },
            ),
            (AtLeastOnce, topic(), None, changelog(StatusRoute::Off)),
            (
                AtLeastOnce,
                topic(),
                Some(Relay),
                changelog(StatusRoute::Relay),
            ),
            (
                AtLeastOnce,
                topic(),
                Some(WriteOut),
                changelog(StatusRoute::WithWriteOut),
            ),
            (ExactlyOnce, topic(), None, everything(StatusRoute::Off)),
            (
                ExactlyOnce,
                topic(),
                Some(Relay),
                everything(StatusRoute::InTransaction),
            ),
            (
                ExactlyOnce,
                topic(),
                Some(WriteOut),
                everything(StatusRoute::InTransaction),
            ),
        ];
        for (guarantee, changelog, outbox, expected) in cases {
            let chosen = Strategy::choose(guarantee, changelog.clone(), outbox);
            assert_eq!(chosen, expected, "{guarantee:?} {changelog:?} {outbox:?}");
            let in_write_outs =
                matches!(outbox, Some(WriteOut)) || (guarantee == ExactlyOnce && outbox.is_some());
            assert_eq!(
                chosen.status_in_write_outs(),
                in_write_outs,
                "{guarantee:?} {outbox:?}"
            );
        }
    }
}
