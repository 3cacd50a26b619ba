//! One or more tests per rule of the framework (issue "Foundation", rules 1-10).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::*;

// ---- test fixtures ---------------------------------------------------------------------------------

/// The test agent records what happens to it, so order and visibility can be asserted.
#[derive(Default)]
struct Recorder {
    log: Mutex<Vec<String>>,
}

impl Recorder {
    fn push(&self, entry: impl Into<String>) {
        self.log.lock().unwrap().push(entry.into());
    }
    fn entries(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

const SCREENSHOT: Key<Vec<u8>> = Key::new("screenshot");
const CONTROLS: Key<Vec<String>> = Key::new("controls");
const DECISION: Key<String> = Key::new("decision");
const RESULTS: Key<u32> = Key::new("results");
const REQUEST: Key<String> = keys::REQUEST;
const SCREENSHOT_AS_TEXT: Key<String> = Key::new("screenshot");

type Body = Box<dyn Fn(&ProcessingContext) -> Result<Outputs, StrategyError> + Send + Sync>;

/// A configurable strategy: declarations plus a body computing outputs from the context.
struct Step {
    name: &'static str,
    fail_fast: bool,
    deps: Vec<Dependency>,
    provides: Vec<Provided>,
    body: Body,
}

impl Step {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            fail_fast: true,
            deps: Vec::new(),
            provides: Vec::new(),
            body: Box::new(|_| Ok(Outputs::new())),
        }
    }
    fn needs(mut self, dep: Dependency) -> Self {
        self.deps.push(dep);
        self
    }
    fn gives(mut self, out: Provided) -> Self {
        self.provides.push(out);
        self
    }
    fn tolerant(mut self) -> Self {
        self.fail_fast = false;
        self
    }
    fn body(
        mut self,
        f: impl Fn(&ProcessingContext) -> Result<Outputs, StrategyError> + Send + Sync + 'static,
    ) -> Self {
        self.body = Box::new(f);
        self
    }
    fn failing(self, message: &'static str) -> Self {
        self.body(move |_| {
            Err(StrategyError::with_source(
                message,
                std::io::Error::other("root cause"),
            ))
        })
    }
}

#[async_trait]
impl Strategy<Recorder> for Step {
    fn name(&self) -> &str {
        self.name
    }
    fn fail_fast(&self) -> bool {
        self.fail_fast
    }
    fn dependencies(&self) -> Vec<Dependency> {
        self.deps.clone()
    }
    fn provides(&self) -> Vec<Provided> {
        self.provides.clone()
    }
    async fn execute(
        &self,
        agent: &Recorder,
        ctx: &mut ProcessingContext,
    ) -> Result<Outputs, StrategyError> {
        agent.push(format!("run {}", self.name));
        (self.body)(ctx)
    }
}

type Setup = Box<dyn Fn(&mut StrategyRegistry<Recorder>) -> Result<(), BuildError> + Send + Sync>;

/// A processor made from a closure that registers strategies, with optional middleware.
struct TestProcessor {
    setup: Setup,
    middleware: Vec<Arc<dyn Middleware>>,
    inputs: Vec<Provided>,
}

impl TestProcessor {
    fn new(
        setup: impl Fn(&mut StrategyRegistry<Recorder>) -> Result<(), BuildError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            setup: Box::new(setup),
            middleware: Vec::new(),
            inputs: vec![REQUEST.provided()],
        }
    }
}

/// The processor's own output type: the decision and how many local fields the run produced.
#[derive(Debug, PartialEq)]
struct Summary {
    decision: Option<String>,
    fields: usize,
}

impl ProcessorTemplate for TestProcessor {
    type Agent = Recorder;
    type Output = Summary;
    fn name(&self) -> &'static str {
        "TestProcessor"
    }
    fn setup_strategies(&self, s: &mut StrategyRegistry<Recorder>) -> Result<(), BuildError> {
        (self.setup)(s)
    }
    fn setup_middleware(&self, chain: &mut MiddlewareChain) {
        chain.extend(self.middleware.iter().cloned());
    }
    fn global_inputs(&self) -> Vec<Provided> {
        self.inputs.clone()
    }
    fn finalize(&self, ctx: ProcessingContext, _result: &ProcessingResult) -> Summary {
        Summary {
            decision: ctx.get_local(DECISION).unwrap().cloned(),
            fields: ctx.local().len(),
        }
    }
}

fn global() -> Arc<Values> {
    Arc::new(
        Values::new()
            .with(REQUEST, "type hello".to_owned())
            .with(keys::AGENT_NAME, "TestAgent".to_owned())
            .with(keys::ROUND, 1)
            .with(keys::SESSION_STEP, 7),
    )
}

fn collect() -> Step {
    Step::new("collect")
        .gives(SCREENSHOT.provided())
        .body(|_| Ok(Outputs::new().with(SCREENSHOT, vec![1, 2, 3])))
}

fn decide() -> Step {
    Step::new("decide")
        .needs(SCREENSHOT.required("what the model looks at"))
        .needs(REQUEST.required("what the user asked"))
        .gives(DECISION.provided())
        .body(|ctx| {
            let shot = ctx.require(SCREENSHOT)?;
            let request = ctx.require(REQUEST)?;
            Ok(Outputs::new().with(DECISION, format!("{request} ({} bytes)", shot.len())))
        })
}

fn act() -> Step {
    Step::new("act")
        .needs(DECISION.required("what to do"))
        .gives(RESULTS.provided())
        .body(|_| Ok(Outputs::new().with(RESULTS, 1)))
}

// ---- rule 1: phases run in the fixed order; a phase without a strategy is skipped ------------------

#[tokio::test]
async fn phases_run_in_fixed_order_whatever_the_registration_order() {
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::Cleanup, Step::new("cleanup"))?;
        s.register(ProcessingPhase::MemoryUpdate, Step::new("memory"))?;
        s.register(ProcessingPhase::ActionExecution, act())?;
        s.register(ProcessingPhase::LlmInteraction, decide())?;
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(ProcessingPhase::Setup, Step::new("setup"))?;
        Ok(())
    }))
    .unwrap();
    let agent = Recorder::default();
    let outcome = processor.process(&agent, global()).await.unwrap();
    assert_eq!(
        agent.entries(),
        [
            "run setup",
            "run collect",
            "run decide",
            "run act",
            "run memory",
            "run cleanup"
        ]
    );
    let phases: Vec<_> = outcome.result.phases.iter().map(|p| p.phase).collect();
    assert_eq!(phases, ProcessingPhase::ORDER);
}

#[tokio::test]
async fn phases_without_a_strategy_are_skipped() {
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(ProcessingPhase::LlmInteraction, decide())?;
        Ok(())
    }))
    .unwrap();
    let agent = Recorder::default();
    let outcome = processor.process(&agent, global()).await.unwrap();
    assert_eq!(agent.entries(), ["run collect", "run decide"]);
    assert_eq!(outcome.result.phases.len(), 2);
    assert!(outcome.result.phase(ProcessingPhase::Setup).is_none());
    assert!(
        outcome
            .result
            .phase(ProcessingPhase::ActionExecution)
            .is_none()
    );
}

// ---- rule 2: the strategy interface -----------------------------------------------------------------

#[tokio::test]
async fn a_strategy_exposes_name_fail_fast_dependencies_and_outputs() {
    let s = decide();
    let dyn_s: &dyn Strategy<Recorder> = &s;
    assert_eq!(dyn_s.name(), "decide");
    assert!(dyn_s.fail_fast());
    let deps = dyn_s.dependencies();
    assert_eq!(deps[0].field, "screenshot");
    assert!(deps[0].required);
    assert_eq!(deps[0].type_name, std::any::type_name::<Vec<u8>>());
    assert_eq!(deps[0].description, "what the model looks at");
    assert_eq!(dyn_s.provides(), vec![DECISION.provided()]);
    let optional = CONTROLS.optional("extra");
    assert!(!optional.required);
    assert!(!Step::new("x").tolerant().fail_fast);
}

// ---- rule 3: typed keys; declarations checked; undeclared outputs refused -----------------------------

#[test]
fn a_dependency_declared_with_another_type_than_provided_fails_the_build() {
    let err = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(
            ProcessingPhase::LlmInteraction,
            Step::new("reads_text").needs(SCREENSHOT_AS_TEXT.required("wrong type")),
        )?;
        Ok(())
    }))
    .unwrap_err();
    assert_eq!(
        err,
        BuildError::TypeMismatch {
            strategy: "reads_text".into(),
            phase: ProcessingPhase::LlmInteraction,
            field: "screenshot",
            expected: std::any::type_name::<String>(),
            found: std::any::type_name::<Vec<u8>>(),
        }
    );
}

#[tokio::test]
async fn a_wrong_type_read_inside_a_strategy_fails_clearly() {
    // A read must be declared (see `an_undeclared_read_fails_the_run`), so a strategy that reads a field
    // as another type than its producer wrote is refused when the processor is built, naming both types.
    let built = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(
            ProcessingPhase::LlmInteraction,
            Step::new("misreads")
                .needs(SCREENSHOT_AS_TEXT.optional("read with the wrong type"))
                .body(|ctx| {
                    ctx.require(SCREENSHOT_AS_TEXT)?;
                    Ok(Outputs::new())
                }),
        )?;
        Ok(())
    }));
    let text = built.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("misreads") && text.contains("screenshot"),
        "{text}"
    );
    assert!(text.contains("String"), "{text}");
}

#[tokio::test]
async fn an_undeclared_read_fails_the_run() {
    // Seed 003's "hidden dependencies" pitfall: a strategy that reads a field it does not declare fails
    // instead of coupling itself silently to another strategy's data.
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(
            ProcessingPhase::LlmInteraction,
            Step::new("peeks").body(|ctx| {
                ctx.get(SCREENSHOT)?;
                Ok(Outputs::new())
            }),
        )?;
        Ok(())
    }))
    .unwrap();
    let failure = processor
        .process(&Recorder::default(), global())
        .await
        .unwrap_err();
    let text = failure.to_string();
    assert!(text.contains("peeks"), "{text}");
    assert!(
        format!("{:?}", failure).contains("Undeclared"),
        "{failure:?}"
    );
}

#[tokio::test]
async fn an_undeclared_output_stops_the_run() {
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(
            ProcessingPhase::DataCollection,
            Step::new("sneaky")
                .tolerant()
                .body(|_| Ok(Outputs::new().with(CONTROLS, vec![]))),
        )?;
        Ok(())
    }))
    .unwrap();
    let failure = processor
        .process(&Recorder::default(), global())
        .await
        .unwrap_err();
    assert!(matches!(
        failure.error,
        ProcessingError::BadOutput {
            source: OutputError::Undeclared { field: "controls" },
            ..
        }
    ));
    assert!(
        !failure.local.contains("controls"),
        "refused outputs are not merged"
    );
}

// ---- rule 4: ComposedStrategy ----------------------------------------------------------------------

fn controls_from_screenshot() -> Step {
    Step::new("controls")
        .needs(SCREENSHOT.required("to find controls on"))
        .gives(CONTROLS.provided())
        .body(|ctx| {
            let shot = ctx.require(SCREENSHOT)?;
            Ok(Outputs::new().with(CONTROLS, vec![format!("{} bytes seen", shot.len())]))
        })
}

#[test]
fn composition_dependencies_are_the_union_minus_what_earlier_members_provide() {
    let composed = ComposedStrategy::<Recorder>::new(
        "collect_all",
        true,
        vec![
            Arc::new(collect()),
            Arc::new(controls_from_screenshot().needs(REQUEST.required("context"))),
        ],
    )
    .unwrap();
    let deps: Vec<_> = composed.dependencies().iter().map(|d| d.field).collect();
    assert_eq!(
        deps,
        ["request"],
        "screenshot is provided inside the composition"
    );
    let outs: Vec<_> = composed.provides().iter().map(|p| p.field).collect();
    assert_eq!(outs, ["screenshot", "controls"]);

    // Reversed order: the later member's output does not satisfy the earlier member.
    let reversed = ComposedStrategy::<Recorder>::new(
        "wrong_order",
        true,
        vec![Arc::new(controls_from_screenshot()), Arc::new(collect())],
    )
    .unwrap();
    let deps: Vec<_> = reversed.dependencies().iter().map(|d| d.field).collect();
    assert_eq!(deps, ["screenshot"]);
}

#[test]
fn an_empty_composition_is_an_error() {
    let err = ComposedStrategy::<Recorder>::new("nothing", true, vec![]).unwrap_err();
    assert_eq!(
        err,
        BuildError::EmptyComposition {
            strategy: "nothing".into()
        }
    );
}

#[tokio::test]
async fn composition_members_run_in_order_and_see_earlier_outputs() {
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(
            ProcessingPhase::DataCollection,
            ComposedStrategy::new(
                "collect_all",
                true,
                vec![Arc::new(collect()), Arc::new(controls_from_screenshot())],
            )?,
        )?;
        Ok(())
    }))
    .unwrap();
    let agent = Recorder::default();
    let outcome = processor.process(&agent, global()).await.unwrap();
    assert_eq!(agent.entries(), ["run collect", "run controls"]);
    let phase = &outcome.result.phases[0];
    assert_eq!(phase.strategy, "collect_all");
    let mut outputs = phase.outputs.clone();
    outputs.sort_unstable();
    assert_eq!(outputs, ["controls", "screenshot"]);
    assert_eq!(outcome.output.fields, 2);
}

#[tokio::test]
async fn a_fail_fast_composition_stops_at_the_first_failing_member() {
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(
            ProcessingPhase::DataCollection,
            ComposedStrategy::new(
                "collect_all",
                true,
                vec![
                    Arc::new(Step::new("first").failing("capture failed")),
                    Arc::new(Step::new("second")),
                ],
            )?,
        )?;
        Ok(())
    }))
    .unwrap();
    let agent = Recorder::default();
    let failure = processor.process(&agent, global()).await.unwrap_err();
    assert_eq!(agent.entries(), ["run first"]);
    let text = format!("{:#}", failure.error);
    assert!(text.contains("collect_all"), "{text}");
    assert!(
        matches!(&failure.error, ProcessingError::StrategyFailed { message, .. } if message.contains("capture failed")),
        "{:?}",
        failure.error
    );
}

#[tokio::test]
async fn a_tolerant_composition_records_the_failure_and_continues() {
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(
            ProcessingPhase::DataCollection,
            ComposedStrategy::new(
                "collect_all",
                false,
                vec![
                    Arc::new(Step::new("optional_metrics").failing("no metrics")),
                    Arc::new(collect()),
                ],
            )?,
        )?;
        s.register(ProcessingPhase::LlmInteraction, decide())?;
        Ok(())
    }))
    .unwrap();
    let agent = Recorder::default();
    let outcome = processor.process(&agent, global()).await.unwrap();
    assert_eq!(
        agent.entries(),
        ["run optional_metrics", "run collect", "run decide"]
    );
    let phase = &outcome.result.phases[0];
    assert!(phase.success);
    assert_eq!(phase.tolerated.len(), 1);
    assert_eq!(phase.tolerated[0].strategy, "optional_metrics");
    assert!(phase.tolerated[0].message.contains("no metrics"));
}

// ---- rule 5: chain validation at build time and again at run time ------------------------------------

#[test]
fn an_unsatisfiable_chain_fails_to_build_naming_strategy_phase_and_key() {
    let err = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::LlmInteraction, decide())?;
        s.register(ProcessingPhase::ActionExecution, act())?;
        Ok(())
    }))
    .unwrap_err();
    assert_eq!(
        err,
        BuildError::UnsatisfiedDependency {
            strategy: "decide".into(),
            phase: ProcessingPhase::LlmInteraction,
            field: "screenshot",
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("'decide'")
            && text.contains("llm_interaction")
            && text.contains("'screenshot'")
    );
}

#[test]
fn a_later_phase_does_not_satisfy_an_earlier_one() {
    // decide (LLM) needs the screenshot, which only a later phase provides.
    let err = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::LlmInteraction, decide())?;
        s.register(ProcessingPhase::MemoryUpdate, collect())?;
        Ok(())
    }))
    .unwrap_err();
    assert!(matches!(
        err,
        BuildError::UnsatisfiedDependency {
            field: "screenshot",
            ..
        }
    ));
}

#[test]
fn validation_names_the_member_inside_a_composition() {
    let err = Processor::build(TestProcessor::new(|s| {
        s.register(
            ProcessingPhase::DataCollection,
            ComposedStrategy::new(
                "collect_all",
                true,
                vec![Arc::new(controls_from_screenshot()), Arc::new(collect())],
            )?,
        )?;
        Ok(())
    }))
    .unwrap_err();
    assert_eq!(
        err,
        BuildError::UnsatisfiedDependency {
            strategy: "controls".into(),
            phase: ProcessingPhase::DataCollection,
            field: "screenshot",
        }
    );
}

#[test]
fn declared_global_inputs_satisfy_dependencies_and_optional_ones_never_fail() {
    let mut template = TestProcessor::new(|s| {
        s.register(
            ProcessingPhase::LlmInteraction,
            decide().needs(CONTROLS.optional("nice to have")),
        )?;
        Ok(())
    });
    assert!(
        Processor::build(TestProcessor::new(|s| {
            s.register(ProcessingPhase::LlmInteraction, decide())?;
            Ok(())
        }))
        .is_err()
    );
    template.inputs.push(SCREENSHOT.provided());
    assert!(Processor::build(template).is_ok());
}

#[tokio::test]
async fn a_declared_input_missing_at_run_time_is_an_error_not_a_warning() {
    let mut template = TestProcessor::new(|s| {
        s.register(ProcessingPhase::LlmInteraction, decide())?;
        Ok(())
    });
    template.inputs.push(SCREENSHOT.provided());
    let processor = Processor::build(template).unwrap();
    let agent = Recorder::default();
    // The global data does not actually carry the screenshot.
    let failure = processor.process(&agent, global()).await.unwrap_err();
    assert!(agent.entries().is_empty(), "the strategy must not run");
    assert!(matches!(
        failure.error,
        ProcessingError::MissingDependency {
            phase: ProcessingPhase::LlmInteraction,
            field: "screenshot",
            ..
        }
    ));
}

#[test]
fn two_strategies_for_one_phase_are_refused() {
    let err = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(ProcessingPhase::DataCollection, Step::new("again"))?;
        Ok(())
    }))
    .unwrap_err();
    assert_eq!(
        err,
        BuildError::PhaseTaken {
            phase: ProcessingPhase::DataCollection,
            existing: "collect".into()
        }
    );
}

// ---- rule 6: fail-fast semantics -------------------------------------------------------------------

#[tokio::test]
async fn a_fail_fast_failure_stops_the_pipeline_with_phase_strategy_message_and_source() {
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(
            ProcessingPhase::LlmInteraction,
            Step::new("llm").failing("model unreachable"),
        )?;
        s.register(ProcessingPhase::MemoryUpdate, Step::new("memory"))?;
        Ok(())
    }))
    .unwrap();
    let agent = Recorder::default();
    let failure = processor.process(&agent, global()).await.unwrap_err();
    assert_eq!(
        agent.entries(),
        ["run collect", "run llm"],
        "memory must not run"
    );
    assert_eq!(failure.error.phase(), ProcessingPhase::LlmInteraction);
    assert_eq!(failure.error.strategy(), "llm");
    let ProcessingError::StrategyFailed {
        message, source, ..
    } = &failure.error
    else {
        panic!("unexpected error {:?}", failure.error);
    };
    assert!(
        message.contains("model unreachable") && message.contains("root cause"),
        "{message}"
    );
    assert!(
        std::error::Error::source(source).is_some(),
        "the original cause is kept"
    );
    // What was gathered before the failure is kept for recording the step.
    assert!(failure.local.contains("screenshot"));
    assert_eq!(failure.result.phases.len(), 2);
    assert!(!failure.result.phases[1].success);
}

#[tokio::test]
async fn a_non_fail_fast_failure_is_recorded_and_the_pipeline_continues() {
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(
            ProcessingPhase::ActionExecution,
            Step::new("act").tolerant().failing("click failed"),
        )?;
        s.register(ProcessingPhase::MemoryUpdate, Step::new("memory"))?;
        Ok(())
    }))
    .unwrap();
    let agent = Recorder::default();
    let outcome = processor.process(&agent, global()).await.unwrap();
    assert_eq!(agent.entries(), ["run collect", "run act", "run memory"]);
    assert!(!outcome.result.success);
    let act = outcome
        .result
        .phase(ProcessingPhase::ActionExecution)
        .unwrap();
    assert!(!act.success);
    assert!(act.error.as_deref().unwrap().contains("click failed"));
    assert!(
        outcome
            .result
            .phase(ProcessingPhase::MemoryUpdate)
            .unwrap()
            .success
    );
}

// ---- rule 7: local vs global context; outputs merged into local ---------------------------------------

#[tokio::test]
async fn outputs_go_to_local_data_and_global_data_is_shared_and_untouched() {
    let global = global();
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(ProcessingPhase::LlmInteraction, decide())?;
        Ok(())
    }))
    .unwrap();
    let outcome = processor
        .process(&Recorder::default(), Arc::clone(&global))
        .await
        .unwrap();
    assert_eq!(
        outcome.output.decision.as_deref(),
        Some("type hello (3 bytes)")
    );
    assert!(!global.contains("decision") && !global.contains("screenshot"));
    // A second run starts from empty local data.
    let again = processor
        .process(&Recorder::default(), global)
        .await
        .unwrap();
    assert_eq!(again.output.fields, 2);
}

// ---- rule 8: results and timings -------------------------------------------------------------------

#[tokio::test]
async fn every_phase_result_and_time_and_the_total_are_recorded() {
    let processor = Processor::build(TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(
            ProcessingPhase::LlmInteraction,
            decide().body(|_| {
                std::thread::sleep(std::time::Duration::from_millis(5));
                Ok(Outputs::new().with(DECISION, "x".to_owned()))
            }),
        )?;
        s.register(ProcessingPhase::ActionExecution, act())?;
        Ok(())
    }))
    .unwrap();
    let outcome = processor
        .process(&Recorder::default(), global())
        .await
        .unwrap();
    let result = &outcome.result;
    assert!(result.success && result.error.is_none());
    assert_eq!(result.phases.len(), 3);
    let llm = result.phase(ProcessingPhase::LlmInteraction).unwrap();
    assert!(llm.execution_time >= std::time::Duration::from_millis(5));
    assert_eq!(llm.outputs, ["decision"]);
    let sum: std::time::Duration = result.phases.iter().map(|p| p.execution_time).sum();
    assert!(result.execution_time >= sum);
}

// ---- rule 9: middleware order, on_error, logging spans ----------------------------------------------

struct Tracer {
    name: &'static str,
    log: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Middleware for Tracer {
    fn name(&self) -> &str {
        self.name
    }
    async fn before_process(&self, run: &RunInfo, _ctx: &ProcessingContext) {
        self.log.lock().unwrap().push(format!(
            "before {} {}#{}",
            self.name, run.agent, run.session_step
        ));
    }
    async fn before_phase(
        &self,
        _run: &RunInfo,
        phase: ProcessingPhase,
        _s: &str,
        _c: &ProcessingContext,
    ) {
        self.log
            .lock()
            .unwrap()
            .push(format!("before_phase {} {phase}", self.name));
    }
    async fn after_phase(&self, _run: &RunInfo, result: &PhaseResult) {
        self.log
            .lock()
            .unwrap()
            .push(format!("after_phase {} {}", self.name, result.phase));
    }
    async fn after_process(&self, _run: &RunInfo, result: &ProcessingResult) {
        self.log
            .lock()
            .unwrap()
            .push(format!("after {} {}", self.name, result.success));
    }
    async fn on_error(&self, _run: &RunInfo, error: &ProcessingError) {
        self.log
            .lock()
            .unwrap()
            .push(format!("on_error {} {}", self.name, error.strategy()));
    }
}

fn with_tracers(mut template: TestProcessor, log: &Arc<Mutex<Vec<String>>>) -> TestProcessor {
    for name in ["a", "b"] {
        template.middleware.push(Arc::new(Tracer {
            name,
            log: Arc::clone(log),
        }));
    }
    template
}

#[tokio::test]
async fn middleware_before_runs_in_order_and_after_in_reverse() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let processor = Processor::build(with_tracers(
        TestProcessor::new(|s| {
            s.register(ProcessingPhase::DataCollection, collect())?;
            Ok(())
        }),
        &log,
    ))
    .unwrap();
    processor
        .process(&Recorder::default(), global())
        .await
        .unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        [
            "before a TestAgent#7",
            "before b TestAgent#7",
            "before_phase a data_collection",
            "before_phase b data_collection",
            "after_phase b data_collection",
            "after_phase a data_collection",
            "after b true",
            "after a true",
        ]
    );
}

#[tokio::test]
async fn on_error_reaches_every_middleware_and_after_process_does_not_run() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let processor = Processor::build(with_tracers(
        TestProcessor::new(|s| {
            s.register(
                ProcessingPhase::DataCollection,
                Step::new("boom").failing("x"),
            )?;
            Ok(())
        }),
        &log,
    ))
    .unwrap();
    assert!(
        processor
            .process(&Recorder::default(), global())
            .await
            .is_err()
    );
    let log = log.lock().unwrap();
    assert!(
        log.contains(&"on_error a boom".to_owned()) && log.contains(&"on_error b boom".to_owned())
    );
    assert!(!log.iter().any(|l| l.starts_with("after ")), "{log:?}");
}

/// Captures span names and their fields.
#[derive(Clone, Default)]
struct SpanCapture(Arc<Mutex<Vec<(String, String)>>>);

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>>
    tracing_subscriber::Layer<S> for SpanCapture
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={:?} ", field.name(), value));
            }
        }
        let mut fields = Fields(String::new());
        attrs.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push((attrs.metadata().name().to_owned(), fields.0));
    }
}

#[tokio::test]
async fn the_logging_middleware_opens_a_span_per_run_and_per_phase() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let capture = SpanCapture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let mut template = TestProcessor::new(|s| {
        s.register(ProcessingPhase::DataCollection, collect())?;
        s.register(ProcessingPhase::LlmInteraction, decide())?;
        Ok(())
    });
    template.middleware.push(Arc::new(LoggingMiddleware));
    let processor = Processor::build(template).unwrap();
    processor
        .process(&Recorder::default(), global())
        .await
        .unwrap();
    let spans = capture.0.lock().unwrap().clone();
    let names: Vec<_> = spans.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["processor", "phase", "strategy", "phase", "strategy"]
    );
    assert!(
        spans[0].1.contains("agent=TestAgent") && spans[0].1.contains("round=1"),
        "{}",
        spans[0].1
    );
    assert!(spans[0].1.contains("session_step=7"), "{}", spans[0].1);
    assert!(
        spans[1].1.contains("phase=\"data_collection\""),
        "{}",
        spans[1].1
    );
    assert!(
        spans[3].1.contains("phase=\"llm_interaction\""),
        "{}",
        spans[3].1
    );
}

// ---- rule 10: the template only registers strategies and middleware, with its own output type ---------

#[tokio::test]
async fn a_concrete_processor_is_only_registration_plus_its_own_output() {
    struct Minimal;
    impl ProcessorTemplate for Minimal {
        type Agent = Recorder;
        type Output = Option<u32>;
        fn name(&self) -> &'static str {
            "Minimal"
        }
        fn setup_strategies(&self, s: &mut StrategyRegistry<Recorder>) -> Result<(), BuildError> {
            s.register(ProcessingPhase::DataCollection, collect())?;
            s.register(ProcessingPhase::LlmInteraction, decide())?;
            s.register(ProcessingPhase::ActionExecution, act())?;
            Ok(())
        }
        fn global_inputs(&self) -> Vec<Provided> {
            vec![REQUEST.provided()]
        }
        fn finalize(&self, ctx: ProcessingContext, _r: &ProcessingResult) -> Option<u32> {
            ctx.get_local(RESULTS).unwrap().copied()
        }
    }
    let processor = Processor::build(Minimal).unwrap();
    assert_eq!(
        processor.phases(),
        [
            (ProcessingPhase::DataCollection, "collect"),
            (ProcessingPhase::LlmInteraction, "decide"),
            (ProcessingPhase::ActionExecution, "act"),
        ]
    );
    let outcome = processor
        .process(&Recorder::default(), global())
        .await
        .unwrap();
    assert_eq!(outcome.output, Some(1));
}
