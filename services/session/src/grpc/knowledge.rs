//! The `ufo.v1.KnowledgeStore` gRPC service: validates and bounds requests, parses documents into
//! sections, calls the [`Store`]. A document is stored whole or not at all.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use tracing::instrument;
use ufo_proto::v1::knowledge_store_server::KnowledgeStore;
use ufo_proto::v1::{
    AddDocumentRequest, AddDocumentResponse, AddDocumentsRequest, AddDocumentsResponse,
    AddExperienceRequest, DeleteKnowledgeRequest, DeleteKnowledgeResponse, DocumentFormat,
    ExperienceRating, KnowledgeItem, KnowledgeKind, ListKnowledgeRequest, ListKnowledgeResponse,
    RateExperienceRequest, SearchKnowledgeRequest, SearchKnowledgeResponse, ShareKnowledgeRequest,
};

use super::status::status;
use super::validate::{invalid, known, optional, uuid};
use crate::config::KnowledgeArgs;
use crate::knowledge::parse::{self, ParseError};
use crate::knowledge::{
    DocumentUpload, KnowledgeDelete, KnowledgeFilter, KnowledgeSearch, KnowledgeShare,
    ModelSummary, NewKnowledge, ShareTarget, application, terms,
};
use crate::store::Store;

/// The knowledge service over any store.
#[derive(Clone)]
pub struct KnowledgeService {
    store: Arc<dyn Store>,
    limits: KnowledgeArgs,
}

impl KnowledgeService {
    /// A service over `store` with `limits`.
    pub fn new(store: Arc<dyn Store>, limits: KnowledgeArgs) -> Self {
        Self { store, limits }
    }

    /// A short text field: no NUL, at most the name limit.
    fn name(&self, field: &str, value: &str) -> Result<(), Status> {
        if value.contains('\0') {
            return Err(invalid(field, "contains NUL"));
        }
        if value.len() > self.limits.knowledge_max_name_bytes as usize {
            return Err(invalid(
                field,
                &format!("longer than {} bytes", self.limits.knowledge_max_name_bytes),
            ));
        }
        Ok(())
    }

    /// Checks and parses one document into the rows to store (nothing is written).
    fn document(&self, r: AddDocumentRequest) -> Result<DocumentUpload, Status> {
        self.name("application", &r.application)?;
        self.name("source", &r.source)?;
        if r.source.trim().is_empty() {
            return Err(invalid(
                "source",
                "required (the file name cited with each hit)",
            ));
        }
        if r.content.len() > self.limits.knowledge_max_document_bytes as usize {
            return Err(invalid(
                "content",
                &format!(
                    "{} bytes; documents are limited to {} bytes",
                    r.content.len(),
                    self.limits.knowledge_max_document_bytes
                ),
            ));
        }
        let format = match r.format {
            0 => DocumentFormat::Unspecified,
            value => known("format", value)?,
        };
        let sections = parse::sections(
            format,
            &r.source,
            &r.content,
            self.limits.knowledge_max_section_chars as usize,
            self.limits.knowledge_max_sections as usize,
        )
        .map_err(parse_status)?;
        let app = application(&r.application);
        let sections = sections
            .into_iter()
            .enumerate()
            .map(|(i, s)| NewKnowledge {
                kind: KnowledgeKind::Document,
                owner: String::new(),
                application: app.clone(),
                source: r.source.clone(),
                position: u32::try_from(i).unwrap_or(u32::MAX),
                title: s.title,
                body: s.body,
                code: s.code,
                task_id: None,
                succeeded: true,
                summary: None,
            })
            .collect();
        Ok(DocumentUpload {
            application: app,
            source: r.source,
            sections,
        })
    }

    /// Checks a share or unshare and calls the store.
    async fn share(
        &self,
        r: ShareKnowledgeRequest,
        unshare: bool,
    ) -> Result<KnowledgeItem, Status> {
        let target = match (optional(r.id), optional(r.task_id)) {
            (Some(id), None) => ShareTarget::Id(uuid("id", &id)?),
            (None, Some(task)) => ShareTarget::Task(uuid("task_id", &task)?),
            (Some(_), Some(_)) => return Err(invalid("id", "give an id or a task_id, not both")),
            (None, None) => return Err(invalid("id", "required (or a task_id)")),
        };
        let max = self.limits.knowledge_max_share_callers;
        if r.callers.len() > max as usize {
            return Err(invalid(
                "callers",
                &format!(
                    "{} names; at most {max} (--knowledge-max-share-callers), or share it with everyone",
                    r.callers.len()
                ),
            ));
        }
        let mut callers: Vec<String> = Vec::with_capacity(r.callers.len());
        for (i, caller) in r.callers.into_iter().enumerate() {
            let field = format!("callers[{i}]");
            self.name(&field, &caller)?;
            if caller.is_empty() {
                return Err(invalid(&field, "empty"));
            }
            if caller.chars().any(char::is_control)
                || caller.starts_with(' ')
                || caller.ends_with(' ')
            {
                return Err(invalid(
                    &field,
                    "contains control characters or surrounding spaces",
                ));
            }
            if !callers.contains(&caller) {
                callers.push(caller);
            }
        }
        if callers.is_empty() && !r.everyone {
            return Err(invalid("callers", "name at least one caller, or everyone"));
        }
        self.store
            .share_knowledge(KnowledgeShare {
                target,
                callers,
                everyone: r.everyone,
                unshare,
                max_callers: max,
            })
            .await
            .map_err(status)
    }

    fn hits(&self, requested: u32) -> u32 {
        match requested {
            0 => self.limits.knowledge_default_hits,
            n => n,
        }
        .min(self.limits.knowledge_max_hits)
    }
}

/// A kind a request names (UNSPECIFIED = none).
fn kind(field: &str, value: i32) -> Result<Option<KnowledgeKind>, Status> {
    match value {
        0 => Ok(None),
        _ => known(field, value).map(Some),
    }
}

fn parse_status(error: ParseError) -> Status {
    invalid("content", &error.to_string())
}

#[tonic::async_trait]
impl KnowledgeStore for KnowledgeService {
    #[instrument(name = "knowledge.add_document", skip_all,
        fields(source = %request.get_ref().source, bytes = request.get_ref().content.len()))]
    async fn add_document(
        &self,
        request: Request<AddDocumentRequest>,
    ) -> Result<Response<AddDocumentResponse>, Status> {
        let upload = self.document(request.into_inner())?;
        let (application, source) = (upload.application.clone(), upload.source.clone());
        let (items, replaced) = self
            .store
            .replace_document(application, source, upload.sections)
            .await
            .map_err(status)?;
        Ok(Response::new(AddDocumentResponse { items, replaced }))
    }

    #[instrument(name = "knowledge.add_documents", skip_all,
        fields(documents = request.get_ref().documents.len()))]
    async fn add_documents(
        &self,
        request: Request<AddDocumentsRequest>,
    ) -> Result<Response<AddDocumentsResponse>, Status> {
        let documents = request.into_inner().documents;
        if documents.is_empty() {
            return Err(invalid("documents", "at least one document is required"));
        }
        // Every document is parsed and checked before anything is written: one refusal stores none.
        let mut uploads = Vec::with_capacity(documents.len());
        for (i, document) in documents.into_iter().enumerate() {
            let source = document.source.clone();
            let upload = self.document(document).map_err(|s| {
                Status::new(
                    s.code(),
                    format!("documents[{i}] ({source:?}): {}", s.message()),
                )
            })?;
            uploads.push(upload);
        }
        let done = self
            .store
            .replace_documents(uploads)
            .await
            .map_err(status)?;
        Ok(Response::new(AddDocumentsResponse {
            documents: done
                .into_iter()
                .map(|(items, replaced)| AddDocumentResponse { items, replaced })
                .collect(),
        }))
    }

    #[instrument(name = "knowledge.add_experience", skip_all)]
    async fn add_experience(
        &self,
        request: Request<AddExperienceRequest>,
    ) -> Result<Response<KnowledgeItem>, Status> {
        let r = request.into_inner();
        let kind = match kind("kind", r.kind)? {
            Some(k @ (KnowledgeKind::Experience | KnowledgeKind::Demonstration)) => k,
            _ => return Err(invalid("kind", "must be EXPERIENCE or DEMONSTRATION")),
        };
        let task_id = match optional(r.task_id) {
            Some(t) => Some(uuid("task_id", &t)?),
            None if kind == KnowledgeKind::Experience => {
                return Err(invalid("task_id", "required for an experience"));
            }
            None => None,
        };
        for (field, value) in [
            ("owner", &r.owner),
            ("application", &r.application),
            ("source", &r.source),
        ] {
            self.name(field, value)?;
        }
        for (field, value) in [
            ("title", &r.title),
            ("body", &r.body),
            ("model_summary", &r.model_summary),
        ] {
            if value.contains('\0') {
                return Err(invalid(field, "contains NUL"));
            }
        }
        if r.body.trim().is_empty() {
            return Err(invalid("body", "required"));
        }
        if !r.summary_cost.is_finite() || r.summary_cost < 0.0 {
            return Err(invalid(
                "summary_cost",
                "must be a finite, non-negative amount",
            ));
        }
        let size = r.title.len() + r.body.len() + r.model_summary.len();
        if size > self.limits.knowledge_max_experience_bytes as usize {
            return Err(invalid(
                "body",
                &format!(
                    "{size} bytes; experiences are limited to {} bytes",
                    self.limits.knowledge_max_experience_bytes
                ),
            ));
        }
        let source = match (optional(r.source), task_id) {
            (Some(s), _) => s,
            (None, Some(t)) => format!("task:{t}"),
            (None, None) => return Err(invalid("source", "required without a task_id")),
        };
        let item = self
            .store
            .put_experience(NewKnowledge {
                kind,
                owner: r.owner,
                application: application(&r.application),
                source,
                position: 0,
                title: r.title,
                body: r.body,
                code: String::new(),
                task_id,
                succeeded: r.succeeded,
                summary: (!r.model_summary.trim().is_empty()
                    || r.summary_cost > 0.0
                    || r.summary_input_tokens > 0
                    || r.summary_output_tokens > 0)
                    .then(|| ModelSummary {
                        text: r.model_summary.trim().to_owned(),
                        cost: r.summary_cost,
                        input_tokens: r.summary_input_tokens,
                        output_tokens: r.summary_output_tokens,
                    }),
            })
            .await
            .map_err(status)?;
        Ok(Response::new(item))
    }

    #[instrument(name = "knowledge.rate_experience", skip_all)]
    async fn rate_experience(
        &self,
        request: Request<RateExperienceRequest>,
    ) -> Result<Response<KnowledgeItem>, Status> {
        let r = request.into_inner();
        let task = uuid("task_id", &r.task_id)?;
        self.name("owner", &r.owner)?;
        let rating: ExperienceRating = known("rating", r.rating)?;
        let item = self
            .store
            .rate_experience(task, r.owner, rating)
            .await
            .map_err(status)?;
        Ok(Response::new(item))
    }

    #[instrument(name = "knowledge.search", skip_all, fields(hits))]
    async fn search_knowledge(
        &self,
        request: Request<SearchKnowledgeRequest>,
    ) -> Result<Response<SearchKnowledgeResponse>, Status> {
        let r = request.into_inner();
        if r.query.contains('\0') {
            return Err(invalid("query", "contains NUL"));
        }
        if r.query.chars().count() > self.limits.knowledge_max_query_chars as usize {
            return Err(invalid(
                "query",
                &format!(
                    "longer than {} characters",
                    self.limits.knowledge_max_query_chars
                ),
            ));
        }
        if r.query.trim().is_empty() {
            return Err(invalid("query", "required"));
        }
        self.name("application", &r.application)?;
        self.name("owner", &r.owner)?;
        let mut kinds = Vec::with_capacity(r.kinds.len());
        for k in &r.kinds {
            if let Some(k) = kind("kinds", *k)? {
                kinds.push(k);
            }
        }
        let search = KnowledgeSearch {
            terms: terms(&r.query),
            application: optional(application(&r.application)),
            owner: r.owner,
            kinds,
            limit: self.hits(r.limit),
            per_source: r
                .per_source
                .unwrap_or(self.limits.knowledge_hits_per_source),
        };
        let hits = self.store.search_knowledge(search).await.map_err(status)?;
        tracing::Span::current().record("hits", hits.len());
        Ok(Response::new(SearchKnowledgeResponse { hits }))
    }

    #[instrument(name = "knowledge.list", skip_all)]
    async fn list_knowledge(
        &self,
        request: Request<ListKnowledgeRequest>,
    ) -> Result<Response<ListKnowledgeResponse>, Status> {
        let r = request.into_inner();
        for (field, value) in [
            ("owner", &r.owner),
            ("application", &r.application),
            ("source", &r.source),
        ] {
            self.name(field, value)?;
        }
        let filter = KnowledgeFilter {
            kind: kind("kind", r.kind)?,
            application: optional(application(&r.application)),
            owner: optional(r.owner),
            source: optional(r.source),
            limit: self.hits(r.limit),
        };
        let items = self.store.list_knowledge(filter).await.map_err(status)?;
        Ok(Response::new(ListKnowledgeResponse { items }))
    }

    #[instrument(name = "knowledge.delete", skip_all)]
    async fn delete_knowledge(
        &self,
        request: Request<DeleteKnowledgeRequest>,
    ) -> Result<Response<DeleteKnowledgeResponse>, Status> {
        let r = request.into_inner();
        self.name("source", &r.source)?;
        self.name("owner", &r.owner)?;
        let which = KnowledgeDelete {
            id: optional(r.id).map(|v| uuid("id", &v)).transpose()?,
            source: optional(r.source),
            task_id: optional(r.task_id)
                .map(|v| uuid("task_id", &v))
                .transpose()?,
            owner: optional(r.owner),
        };
        if which.id.is_none() && which.source.is_none() && which.task_id.is_none() {
            return Err(invalid("id", "one of id, source or task_id is required"));
        }
        let deleted = self.store.delete_knowledge(which).await.map_err(status)?;
        Ok(Response::new(DeleteKnowledgeResponse { deleted }))
    }

    #[instrument(name = "knowledge.share", skip_all,
        fields(callers = request.get_ref().callers.len(), everyone = request.get_ref().everyone))]
    async fn share_knowledge(
        &self,
        request: Request<ShareKnowledgeRequest>,
    ) -> Result<Response<KnowledgeItem>, Status> {
        Ok(Response::new(
            self.share(request.into_inner(), false).await?,
        ))
    }

    #[instrument(name = "knowledge.unshare", skip_all,
        fields(callers = request.get_ref().callers.len(), everyone = request.get_ref().everyone))]
    async fn unshare_knowledge(
        &self,
        request: Request<ShareKnowledgeRequest>,
    ) -> Result<Response<KnowledgeItem>, Status> {
        Ok(Response::new(self.share(request.into_inner(), true).await?))
    }
}
