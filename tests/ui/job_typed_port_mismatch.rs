use streamwork::prelude::*;

#[derive(Clone, Debug)]
enum Reading {
    Count(u64),
    Name(String),
}

#[derive(Clone)]
struct Show;

impl Operator for Show {
    type In = Reading;
    type Key = NoKey;
    type Out = Collector<String>;
    type Time = AnyTime;
    fn statefulness(&self) -> Statefulness {
        Statefulness::Stateless
    }
    fn on_record(&mut self, value: Reading, ctx: &mut Context<'_, NoKey, Collector<String>>) {
        ctx.emit(format!("{value:?}"));
    }
}

fn main() {
    let _ = job! {
        source counts = VecSource::new(vec![1u64]);
        source names = VecSource::new(vec![String::from("a")]);
        operator shown = Show <- port(counts => Reading::Count), port(names => Reading::Count);
        sink out = StdoutSink::display::<String>() <- shown;
    };
}
