//! Where the builder places a pre-aggregating operator's two halves (see
//! [`streamwork_core::pre_aggregate`]): a [`LocalCombiner`] fused into each
//! task that sends it a keyed stream, and the operator after the exchange
//! reading two ports, the records that crossed as they are and the
//! partials.

use streamwork_core::component::{
    Admits, KeyKind, Operator, PreAggregating, ReadsPartials, TimeRequirement,
};
use streamwork_core::outputs::Outputs;
use streamwork_core::ports::Either;
use streamwork_core::pre_aggregate::LocalAggregate;
use streamwork_core::{NodeId, StreamTime};

use super::input::{GroupingSpec, Inputs};
use super::ports::InputPort;
use super::{JobBuilder, combiner_name};
use crate::combiner::{Gate, LocalCombiner, LocalOutputs};
use streamwork_core::grouping::GroupingKind;

/// An operator with `parallelism` instances reading `inputs`, about to be
/// added to `job` as `name`: the engine's side of
/// [`Operator::pre_aggregation`].
pub(super) struct Placing<'b, D, O: Operator, Tm> {
    pub(super) job: &'b mut JobBuilder<D>,
    pub(super) name: &'b str,
    pub(super) parallelism: u32,
    pub(super) inputs: Inputs<O::In, O::Key, Tm>,
}

impl<D, O: Operator, Tm: StreamTime> Placing<'_, D, O, Tm> {
    /// Whether pre-aggregation applies: combiners on, a keyed operator
    /// whose every input is keyed, and more than one instance on one side
    /// of an exchange at least (between one instance and one the exchange
    /// scatters nothing, and merging would do the operator's work twice).
    pub(super) fn applies(&self) -> bool {
        let keyed = GroupingSpec::Fixed(GroupingKind::Key);
        let items = self.inputs.items();
        self.job.config.combiners
            && O::Key::KEYED
            && !items.is_empty()
            && items.iter().all(|(input, _)| input.grouping() == keyed)
            && (self.parallelism > 1
                || items.iter().any(|(input, _)| {
                    self.job.nodes[input.stream().node().index()].parallelism > 1
                }))
    }
}

impl<D, O, Tm> PreAggregating<O> for Placing<'_, D, O, Tm>
where
    O: Operator,
    O::Time: Admits<Tm>,
    Tm: StreamTime,
{
    type Output = <O::Out as Outputs>::Streams<<O::Time as TimeRequirement>::Out<Tm>>;

    fn pre_aggregate<L, G>(self, local: L, global: G, late: Option<u32>) -> Self::Output
    where
        L: LocalAggregate<In = O::In, Key = <O::Key as KeyKind>::Value>,
        G: ReadsPartials<O, L::Partial>,
    {
        let Placing {
            job,
            name,
            parallelism,
            inputs,
        } = self;
        let gate = Gate::default();
        let items = inputs.into_items();
        let several = items.len() > 1;
        let carried = O::Key::carried(L::key_of);
        let hash_of = carried.clone();
        let hash = move |partial: &L::Partial| {
            let key = O::Key::extract(&hash_of, partial);
            O::Key::hash(O::Key::as_ref(&key))
        };
        let (mut records, mut partials) = (Vec::new(), Vec::new());
        for (i, (input, extractor)) in items.into_iter().enumerate() {
            let step = combiner_name(name, several.then_some(i));
            let combiner =
                LocalCombiner::<L, O::Key>::new(local.clone(), extractor.clone(), gate.clone());
            let node = job.fused_after(&step, input.stream(), combiner);
            let (raw, merged) = LocalOutputs::<O::In, L::Partial>::streams::<Tm>(job.id, node);
            partials.push((input.beside(merged, hash.clone()), carried.clone()));
            records.push((input.reading(raw), extractor));
        }
        let ports = vec![
            InputPort::new("in", Inputs::from_items(records), Either::Left),
            InputPort::new("partials", Inputs::from_items(partials), Either::Right),
        ];
        let operator = NodeId(job.nodes.len() as u32);
        let streams = job.operator_with_ports(name, parallelism, global, ports);
        job.gates
            .push((late.map(|channel| (operator, channel)), gate));
        streams
    }
}
